"""CPU simulator of a parsed `.pto` module (see `executor`)."""
