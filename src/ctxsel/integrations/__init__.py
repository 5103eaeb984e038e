"""ctxsel inside RAG frameworks: one module per framework, each an optional extra.

- ``ctxsel.integrations.langchain``: ``CtxselCompressor`` (a LangChain
  ``BaseDocumentCompressor``) and ``select_documents`` (for ``RunnableLambda``);
  ``pip install 'ctxsel[langchain]'``.
- ``ctxsel.integrations.llamaindex``: ``CtxselPostprocessor`` (a LlamaIndex
  ``BaseNodePostprocessor``); ``pip install 'ctxsel[llamaindex]'``.
- ``ctxsel.integrations.haystack``: ``CtxselSelector`` (a Haystack ``@component``);
  ``pip install 'ctxsel[haystack]'``.

Importing this package imports none of the frameworks; each module raises an
ImportError naming its extra when its framework is missing. The selection
itself (scores, any ctxsel method, the never-empty rule and the metadata
written into kept documents) lives once in ``_core``.
"""
