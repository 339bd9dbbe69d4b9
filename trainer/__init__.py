"""XLNet in Keras 3, one subpackage per concern (docs/architecture.md): layers, models, configs,
runtime, inputs, evaluation, tasks, serving, conversion, and the commands on top."""
