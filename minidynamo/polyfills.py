"""Python stand-ins, inlined in their place, for library functions that catch an exception on their ordinary path."""
import copy
from typing import Any, Callable, Dict


def keep_alive(x: Any, memo: dict) -> None:
    """copy._keep_alive: the memo keeps every copied original alive, in a list under its own id."""
    key = id(memo)
    if key in memo:
        memo[key].append(x)
    else:
        memo[key] = [x]


def deepcopy_tuple(x: tuple, memo: dict, deepcopy: Callable = copy.deepcopy) -> tuple:
    """copy._deepcopy_tuple: the items copied; the tuple itself when none of them changed, unless
    copying them already copied the tuple (a recursive structure)."""
    y = [deepcopy(a, memo) for a in x]
    key = id(x)
    if key in memo:
        return memo[key]
    for original, copied in zip(x, y):
        if original is not copied:
            return tuple(y)
    return x


# library function -> the function inlined instead
SUBSTITUTES: Dict[Callable, Callable] = {
    copy._keep_alive: keep_alive,
    copy._deepcopy_tuple: deepcopy_tuple,
}
