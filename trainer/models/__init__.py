"""The XLNet network, its pretraining objective and fine-tuning heads (Keras models built from trainer/layers)."""
