"""Apache Beam preprocessing: raw text corpus -> XLNet pretraining TFRecords."""
