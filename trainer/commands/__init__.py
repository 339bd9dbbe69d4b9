"""The `xlnet` subcommands of the trainer: flags in, typed configurations out, once (top of trainer/)."""

# The exit codes of the trainer commands (docs/training.md): 0 when done (or preempted, checkpoint saved).
EXIT_USAGE = 2  # bad input: a flag, a file or a setting, named in the message
EXIT_DIVERGED = 3  # the loss became NaN or infinite; nothing was saved after the last good checkpoint
