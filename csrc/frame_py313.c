/* The version layer for CPython 3.13: its _PyInterpreterFrame layout (f_executable, f_funcobj,
 * instr_ptr), and frames that whoever does not evaluate them must clear and pop. */
#include "minidynamo.h"

#if PY_VERSION_HEX < 0x030D0000 || PY_VERSION_HEX >= 0x030E0000
#error "frame_py313.c is for CPython 3.13; add a frame file for this version"
#endif

#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#include <internal/pycore_ceval.h>
#undef Py_BUILD_CORE

#define UNCONVERTIBLE_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)

PyCodeObject *frame_code(struct _PyInterpreterFrame *f)
{
    return _PyFrame_GetCode(f);
}

PyFunctionObject *frame_function(struct _PyInterpreterFrame *f)
{
    return (PyFunctionObject *)f->f_funcobj;
}

PyObject *frame_globals(struct _PyInterpreterFrame *f)
{
    return f->f_globals;
}

PyObject *frame_builtins(struct _PyInterpreterFrame *f)
{
    return f->f_builtins;
}

PyObject *frame_slot(struct _PyInterpreterFrame *f, int i)
{
    return f->localsplus[i];
}

int frame_is_convertible(struct _PyInterpreterFrame *f)
{
    PyCodeObject *co = _PyFrame_GetCode(f);
    if ((co->co_flags & UNCONVERTIBLE_FLAGS) || !(co->co_flags & CO_OPTIMIZED))
        return 0;
    if (f->owner != FRAME_OWNED_BY_THREAD || !PyFunction_Check(f->f_funcobj) || f->f_locals != NULL)
        return 0;
    /* A fresh frame points at its first instruction, which has not run yet. */
    return f->instr_ptr == _PyCode_CODE(co);
}

PyObject *frame_vectorcall(PyObject *fn, struct _PyInterpreterFrame *f, Py_ssize_t nargs)
{
    return PyObject_Vectorcall(fn, f->localsplus, nargs, NULL);
}

/* The frame is on top of the thread's data stack and not linked into tstate->current_frame (the
 * evaluator links it on entry). CPython exports the function its evaluator ends a frame with: it
 * drops the frame's references (handing them to a frame object that outlives it, if any) and pops
 * it, freeing its data-stack chunk when the frame was the chunk's first. */
void frame_finish(PyThreadState *ts, struct _PyInterpreterFrame *f)
{
    /* Left unset on entry; CPython reads it only to link a frame object that outlives the frame. */
    f->previous = NULL;
    _PyEval_FrameClearAndPop(ts, f);
}

/* Still maintained by 3.13 (every write gives a dict a new, globally unique tag), only deprecated. */
uint64_t dict_version(PyObject *dict)
{
    _Py_COMP_DIAG_PUSH
    _Py_COMP_DIAG_IGNORE_DEPR_DECLS
    return ((PyDictObject *)dict)->ma_version_tag;
    _Py_COMP_DIAG_POP
}

/* Every evaluator call spends one of Py_C_RECURSION_LIMIT (10,000) whatever the stack's size, and a
 * hooked Python call is one or two of them where eager's is none: keep half for the frames that run
 * unhooked from then on. */
int c_recursion_low(PyThreadState *ts)
{
    return ts->c_recursion_remaining < Py_C_RECURSION_LIMIT / 2;
}
