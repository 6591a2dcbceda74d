"""Imported only by the forkserver template when a migrated test module was collected.

Installs :mod:`continuous_test.migrate`'s replacement for the template's whole life,
so every rank forked from it imports a migrated test module as the controller did.
Only ranks of continuous_test's classes are forked from the template, so the
replacement cannot reach a class that runs on torch's own engine.
"""
from __future__ import annotations

from continuous_test import migrate

migrate.install()
