"""The `xlnet` subcommands of the trainer: flags in, typed configurations out, once (top of trainer/)."""

# The exit codes of every `xlnet` command (xlnet_cli.EXIT_STATUS says them in --help): 0 when done
# (or preempted, checkpoint saved).
EXIT_USAGE = 2  # usage or bad input: a flag, a file or a setting, named in the message
EXIT_DATA = 3  # a data or state problem: damaged data, a diverged run, no readable checkpoint
