/* The version layer for CPython 3.14: 3.13's frame, with the code, function and local slots held as
 * tagged _PyStackRef values (deferred reference counting), and dicts without a version tag. */
#include "minidynamo.h"

#if PY_VERSION_HEX < 0x030E0000 || PY_VERSION_HEX >= 0x030F0000
#error "frame_py314.c is for CPython 3.14; add a frame file for this version"
#endif

#define Py_BUILD_CORE
#include <internal/pycore_interpframe.h>
#include <internal/pycore_ceval.h>
#undef Py_BUILD_CORE

#define UNCONVERTIBLE_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)
#define ARGS_ON_STACK 8

PyCodeObject *frame_code(struct _PyInterpreterFrame *f)
{
    return _PyFrame_GetCode(f);
}

PyFunctionObject *frame_function(struct _PyInterpreterFrame *f)
{
    return _PyFrame_GetFunction(f);
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
    _PyStackRef ref = f->localsplus[i];
    return PyStackRef_IsNull(ref) ? NULL : PyStackRef_AsPyObjectBorrow(ref);
}

int frame_is_convertible(struct _PyInterpreterFrame *f)
{
    PyCodeObject *co = _PyFrame_GetCode(f);
    if ((co->co_flags & UNCONVERTIBLE_FLAGS) || !(co->co_flags & CO_OPTIMIZED))
        return 0;
    if (f->owner != FRAME_OWNED_BY_THREAD || f->f_locals != NULL ||
        !PyFunction_Check(PyStackRef_AsPyObjectBorrow(f->f_funcobj)))
        return 0;
    /* A fresh frame points at its first instruction, which has not run yet. */
    return f->instr_ptr == _PyFrame_GetBytecode(f);
}

/* The frame owns its arguments until frame_finish: borrowed pointers to them are enough. */
PyObject *frame_vectorcall(PyObject *fn, struct _PyInterpreterFrame *f, Py_ssize_t nargs)
{
    PyObject *on_stack[ARGS_ON_STACK] = {NULL};
    PyObject **args = nargs <= ARGS_ON_STACK ? on_stack : PyMem_Malloc(nargs * sizeof(PyObject *));
    if (args == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nargs; i++)
        args[i] = PyStackRef_AsPyObjectBorrow(f->localsplus[i]);
    PyObject *result = PyObject_Vectorcall(fn, args, nargs, NULL);
    if (args != on_stack)
        PyMem_Free(args);
    return result;
}

/* As on 3.13: the frame is on top of the thread's data stack and not yet linked into
 * tstate->current_frame; the exported function the evaluator ends a frame with closes its stack
 * references, pops it and frees its data-stack chunk when the frame was the chunk's first. */
void frame_finish(PyThreadState *ts, struct _PyInterpreterFrame *f)
{
    _PyEval_FrameClearAndPop(ts, f);
}

/* 3.14 dicts keep no version tag. A dict watcher counts every event of the dicts asked about (a
 * write, or the dict's death, after which its address may be reused); the count is their version.
 * Without a free watcher slot every call returns a new version, so nothing is ever taken as unchanged. */
static int watcher_id = -1;
static int watcher_tried = 0;
static uint64_t dict_events = 0;

static int count_event(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *value)
{
    dict_events++;
    return 0;
}

uint64_t dict_version(PyObject *dict)
{
    if (!watcher_tried) {
        watcher_tried = 1;
        watcher_id = PyDict_AddWatcher(count_event);
        if (watcher_id < 0)
            PyErr_Clear();
    }
    if (watcher_id >= 0) {
        if (PyDict_Watch(watcher_id, dict) == 0)
            return dict_events;
        PyErr_Clear();
    }
    return ++dict_events;
}

/* 3.14 bounds nested evaluator calls by the C stack's own size, which c_stack_left watches. */
int c_recursion_low(PyThreadState *ts)
{
    return 0;
}
