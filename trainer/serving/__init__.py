"""The serving SavedModel: its module and signatures, the in-graph text encoder and SQuAD answerer."""
