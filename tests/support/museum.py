"""The five documents and the question every framework test selects from."""

TEXTS = [
    "Parking near the museum is limited on weekends.",
    "The meteorite in the museum weighs 3.2 kg.",
    "Tickets cost 8 euros for adults.",
    "The meteorite fell near the museum in 1902; its weight surprised everyone.",
    "The cafe serves soup.",
]
QUERY = "How much does the meteorite in the museum weigh?"
