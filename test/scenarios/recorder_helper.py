"""A helper module of a test file: it imports collectives by name, as library code does."""
from torch.distributed import all_reduce, isend  # noqa: F401 - bound before any rank starts


def reduce_in_helper(tensor):
    all_reduce(tensor)
