"""What a data directory looks like to the model (`xlnet inspect`): records decoded into text,
the permutations the trainer draws, statistics of the whole directory."""
