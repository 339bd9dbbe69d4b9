"""Running and storing: the controller, distribution, optimization, the model directory and reading a model back."""
