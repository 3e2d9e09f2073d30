"""Conformance: exceptions raised and caught inside the traced code (raise, dict keys, attributes,
StopIteration of user iterators and generators, try/except/else/finally, with blocks, chaining), at
several inline depths: one graph, equal to eager, as torch._dynamo; exceptions that leave the frame
and graph breaks inside try blocks behave as eager (tests/break_harness.py)."""
import contextlib

import pytest
import torch

from break_harness import Cases
from translator_harness import REFERENCE, ConformanceCases, assert_same, fresh_dynamo, rand  # noqa: F401

CASES = ConformanceCases()
case = CASES.case


class MyError(ValueError):
    def __init__(self, code, msg="bad"):
        super().__init__(msg)
        self.code = code


class PlainError(Exception):
    pass


def raise_value_error(msg):
    raise ValueError(msg)


def depth_two(msg):
    return raise_value_error(msg) + 1


def depth_three(msg):
    y = depth_two(msg)
    return y


# =============================================================================================
# raise and except
# =============================================================================================
@case()
def raise_caught(x):
    try:
        raise ValueError("x")
    except ValueError:
        x = x + 1
    return x


@case()
def raise_class_caught(x):
    try:
        raise KeyError
    except KeyError as e:
        x = x + len(e.args)
    return x


@case(torch_breaks="str() of a KeyError gives its argument without the quotes repr adds")
def except_tuple_as(x):
    try:
        raise KeyError("k")
    except (ValueError, KeyError) as e:
        return x + len(e.args), str(e), repr(e), type(e).__name__


@case()
def except_base_class(x):
    try:
        raise ZeroDivisionError("z", 2)
    except ArithmeticError as e:
        return x * e.args[1], str(e), repr(e)


@case()
def except_first_matching_clause(x):
    try:
        raise IndexError("i")
    except KeyError:
        return x + 1
    except LookupError:
        return x + 2
    except Exception:
        return x + 3


@case(torch_breaks="formatting an exception in an f-string raises TypeError in the trace")
def exception_message_in_fstring(x):
    try:
        raise RuntimeError("boom")
    except RuntimeError as e:
        return x + len(f"{e}!"), e.args


@case()
def else_clause(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    else:
        y = y * 2
    return y


@case()
def finally_after_raise_caught(x):
    log = []
    try:
        try:
            raise ValueError("v")
        finally:
            log.append("finally")
            x = x * 2
    except ValueError:
        log.append("caught")
    return x, log


@case()
def finally_on_return(x):
    log = []

    def inner(t):
        try:
            return t + 1
        finally:
            log.append("f")

    return inner(x), log


@case()
def raise_from_cause(x):
    try:
        try:
            raise KeyError("a")
        except KeyError as e:
            raise ValueError("b") from e
    except ValueError as e:
        return x + (1 if isinstance(e.__cause__, KeyError) else 2), e.__suppress_context__


@case()
def raise_from_none(x):
    try:
        try:
            raise KeyError("a")
        except KeyError:
            raise ValueError("b") from None
    except ValueError as e:
        return x + (e.__cause__ is None) + e.__suppress_context__ + isinstance(e.__context__, KeyError)


@case()
def context_chained(x):
    try:
        try:
            raise KeyError("a")
        except KeyError:
            raise ValueError("b")
    except ValueError as e:
        return x + isinstance(e.__context__, KeyError), e.__context__.args


@case()
def bare_reraise_caught_outside(x):
    try:
        try:
            raise ValueError("inner")
        except ValueError:
            x = x + 1
            raise
    except ValueError as e:
        return x * 2, str(e)


@case()
def not_matched_then_outer(x):
    try:
        try:
            raise KeyError("k")
        except ValueError:
            x = x + 100
    except KeyError:
        x = x + 1
    return x


@case(torch_breaks="super().__init__ of a ValueError subclass is not a function it can call")
def user_exception_init_traced(x):
    try:
        raise MyError(3, "custom")
    except ValueError as e:
        return x * e.code, str(e), e.args


@case()
def user_exception_plain(x):
    try:
        raise PlainError("p", 1)
    except PlainError as e:
        return x + e.args[1], str(e)


@case()
def mutations_before_raise_kept(x):
    items = [1]
    d = {"a": 1}
    try:
        items.append(2)
        d["b"] = 2
        y = x + 1
        raise ValueError
    except ValueError:
        items.append(3)
    return y, items, d


@case()
def raise_in_loop_caught_each_time(x):
    n = 0
    for i in range(4):
        try:
            if i % 2:
                raise ValueError(i)
            x = x + 1
        except ValueError as e:
            n += e.args[0]
    return x * n


@case(torch_breaks="BaseException.add_note is not traced")
def add_note_read_back(x):
    try:
        e = ValueError("v")
        e.add_note("note")
        raise e
    except ValueError as caught:
        return x + len(caught.__notes__), caught.__notes__


# =============================================================================================
# exceptions from inlined functions, several depths
# =============================================================================================
@case()
def caught_from_depth_one(x):
    try:
        raise_value_error("d1")
    except ValueError as e:
        return x + 1, str(e)


@case()
def caught_from_depth_three(x):
    try:
        depth_three("d3")
    except ValueError as e:
        return x + 3, str(e)


@case()
def caught_in_middle_frame(x):
    def middle(t):
        try:
            depth_two("mid")
        except ValueError:
            return t + 10
        return t

    return middle(x) * 2


@case()
def callee_finally_then_caller_catches(x):
    log = []

    def callee():
        try:
            raise_value_error("c")
        finally:
            log.append("callee finally")

    try:
        callee()
    except ValueError:
        log.append("caller")
    return x + 1, log


# =============================================================================================
# Python's own exceptions: dict keys, attributes, iteration
# =============================================================================================
@case()
def missing_dict_key(x):
    d = {}
    try:
        v = d["a"]
    except KeyError:
        v = 2
    return x * v


@case(torch_breaks="str() of the KeyError a dict raises is '' (its args are lost)")
def missing_dict_key_message(x):
    d = {"b": 1}
    try:
        d.pop("a")
    except KeyError as e:
        return x + 1, str(e), e.args


@case()
def missing_key_in_helper(x):
    def lookup(d, k):
        return d[k]

    try:
        return x * lookup({"a": 2}, "b")
    except LookupError:
        return x + 1


@case()
def folded_builtin_raises(x):
    try:
        n = int("seven")
    except ValueError as e:
        n = len(str(e))
    return x + n


@case(torch_breaks="the ValueError str.index raises in its trace has no args (a wrong result)")
def folded_method_raises(x):
    try:
        n = "abc".index("z")
    except ValueError as e:
        n = len(e.args)
    return x + n


class Lazy:
    def __init__(self):
        self.present = 1

    def __getattr__(self, name):
        if name.startswith("dyn_"):
            return len(name)
        raise AttributeError(f"no {name}")


class Forwarding(Lazy):
    def __getattr__(self, name):
        return super().__getattr__(name)


@case()
def hasattr_getattr_raises(x):
    obj = Lazy()
    return x + hasattr(obj, "missing") + hasattr(obj, "dyn_a") + hasattr(obj, "present")


@case()
def hasattr_through_super_getattr(x):
    obj = Forwarding()
    return x + hasattr(obj, "missing") + hasattr(obj, "dyn_ab")


@case()
def getattr_default_getattr_raises(x):
    obj = Lazy()
    return x + getattr(obj, "missing", 5) + getattr(obj, "dyn_abc", 0)


class Empty:
    pass


@case()
def attribute_error_caught(x):
    try:
        Empty().nope
    except AttributeError as e:
        return x + 1, str(e)


class It:
    def __init__(self, n):
        self.n, self.i = n, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


@case()
def for_over_user_iterator(x):
    for i in It(3):
        x = x + i
    return x


@case()
def next_default_user_iterator(x):
    it = It(1)
    return x + next(it, 10) + next(it, 20)


@case()
def next_exhausted_caught(x):
    it = iter([1])
    next(it)
    try:
        next(it)
    except StopIteration:
        x = x + 1
    return x


@case()
def list_of_user_iterator(x):
    return x + sum(list(It(4)))


def gen_raising(n):
    for i in range(n):
        yield i
    raise KeyError("gen done")


@case(torch_breaks="str() of a KeyError gives its argument without the quotes repr adds")
def generator_raises_caught(x):
    seen = []
    try:
        for i in gen_raising(2):
            seen.append(i)
    except KeyError as e:
        seen.append(str(e))
    return x + len(seen), seen


@contextlib.contextmanager
def tracked(log):
    log.append("enter")
    try:
        yield 5
    finally:
        log.append("exit")


@case()
def contextmanager_try_finally(x):
    log = []
    with tracked(log) as v:
        x = x + v
    return x, log


class Suppress:
    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        self.seen = typ
        return typ is not None and issubclass(typ, ValueError)


@case()
def with_exit_suppresses(x):
    s = Suppress()
    with s:
        x = x + 1
        raise ValueError("swallowed")
    return x, s.seen.__name__


@case()
def with_exit_does_not_suppress(x):
    s = Suppress()
    try:
        with s:
            raise KeyError("k")
    except KeyError:
        x = x * 3
    return x, s.seen.__name__


@case()
def no_grad_block_exception(x):
    try:
        with torch.no_grad():
            y = x * 2
            raise ValueError("inside")
    except ValueError:
        pass
    return y, torch.is_grad_enabled()


@pytest.mark.parametrize("fn,input_sets,graphs", CASES.params())
def test_traced_exception(fn, input_sets, graphs):
    assert_same(fn, *input_sets, graphs=graphs)


# =============================================================================================
# exceptions that leave the frame; graph breaks around handlers (break_harness)
# =============================================================================================
BREAKS = Cases()
x3 = lambda: (rand(3),)  # noqa: E731


@BREAKS.case(x3, graphs=1)
def escapes_frame(x):
    y = x + 1
    raise ValueError("escapes")


@BREAKS.case(lambda: (rand(3), []), graphs=1)
def escapes_after_mutation(x, log):
    log.append(1)
    y = x * 2
    depth_two("deep")
    log.append(2)
    return y


@BREAKS.case(x3, graphs=1)
def escapes_unmatched_handler(x):
    y = x + 1
    try:
        raise KeyError("k")
    except ValueError:
        y = y * 0
    return y


@BREAKS.case(x3, graphs=1)
def reraised_escapes(x):
    y = x + 1
    try:
        raise_value_error("re")
    except ValueError:
        y = y * 2
        raise


@BREAKS.case(x3, graphs=1, breaks=1)
def print_in_handler(x):
    y = x.relu()
    try:
        z = y + 1
        raise KeyError("k")
    except KeyError as e:
        print("caught", repr(e))
        z = y * 3
    return z


@BREAKS.case(x3, graphs=1, breaks=1)
def print_in_try_no_raise(x):
    y = x + 1
    try:
        y = y * 2
        print("in try")
    except ValueError:
        y = y * 0
    return y.sin()


@BREAKS.case(x3, graphs=2, breaks=1)
def print_after_caught(x):
    y = x + 1
    try:
        raise ValueError("v")
    except ValueError:
        y = y * 2
    print("after")
    return y.sin()


@BREAKS.case(x3, graphs=1, breaks=2)  # the helper, run as written, is converted too: its own break
def print_in_helper_handler(x):
    def helper(t):
        try:
            raise KeyError("h")
        except KeyError:
            print("helper caught")
            return t * 2

    return helper(x + 1)


@pytest.mark.parametrize("case", BREAKS.params())
def test_breaks_and_escapes(case):
    case.run()
