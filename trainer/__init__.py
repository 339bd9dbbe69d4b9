"""XLNet in Keras 3: layers, network, permutation-LM objective, training, export."""
