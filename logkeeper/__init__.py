"""The ``logkeeper`` console script: dispatches to the packages, importing each inside its
subcommand."""
