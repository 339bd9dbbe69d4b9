"""The `xlnet` subcommands of the trainer: flags in, typed run settings out, once (top of trainer/).

Each module's ``run(args)`` returns 0 or raises; the exit codes are tfrecords/errors.py's, mapped once
by xlnet_cli.py."""
