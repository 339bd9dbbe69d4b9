"""One objective each on the shared controller: pretraining, the sequence tasks and SQuAD."""
