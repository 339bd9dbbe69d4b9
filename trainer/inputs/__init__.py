"""What fine-tuning tasks read: labeled text files, multiple-choice and SQuAD inputs, seeded batches."""
