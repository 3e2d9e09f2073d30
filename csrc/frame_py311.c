/* The version layer for CPython 3.11: its _PyInterpreterFrame layout.
 * Each supported CPython has a sibling file implementing the same functions (minidynamo.h). */
#include "minidynamo.h"

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "frame_py311.c is for CPython 3.11; add a frame file for this version"
#endif

#define Py_BUILD_CORE
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#define UNCONVERTIBLE_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)

PyCodeObject *frame_code(struct _PyInterpreterFrame *f)
{
    return f->f_code;
}

PyFunctionObject *frame_function(struct _PyInterpreterFrame *f)
{
    return f->f_func;
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
    PyCodeObject *co = f->f_code;
    if ((co->co_flags & UNCONVERTIBLE_FLAGS) || !(co->co_flags & CO_OPTIMIZED))
        return 0;
    if (f->owner != FRAME_OWNED_BY_THREAD || f->f_func == NULL || f->f_locals != NULL)
        return 0;
    /* A fresh frame points one code unit before its first instruction. */
    return f->prev_instr == _PyCode_CODE(co) - 1;
}

PyObject *frame_vectorcall(PyObject *fn, struct _PyInterpreterFrame *f, Py_ssize_t nargs)
{
    return PyObject_Vectorcall(fn, f->localsplus, nargs, NULL);
}

/* _PyEval_Vector clears and pops the frame once the hook returns. */
void frame_finish(PyThreadState *ts, struct _PyInterpreterFrame *f)
{
}

uint64_t dict_version(PyObject *dict)
{
    return ((PyDictObject *)dict)->ma_version_tag;
}

int c_recursion_low(PyThreadState *ts)
{
    return 0;
}
