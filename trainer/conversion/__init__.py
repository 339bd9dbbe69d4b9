"""Other frameworks' layouts, both directions: the original TF1 release and Hugging Face transformers."""
