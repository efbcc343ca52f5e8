from raysfl.cli import entry

entry()
