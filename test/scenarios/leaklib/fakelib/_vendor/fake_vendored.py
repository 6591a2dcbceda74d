"""Imported from the directory fakelib put on sys.path."""
VALUE = 42
