"""The `isr` commands, one module each: its parser and its function (cli.py gathers them)."""
