"""Fakes and helpers the tests share, imported as ``tests.support.<module>``."""
