/* The version-neutral part of the frame layer: what the hook and guards read from a frame, the
 * FrameInfo handed to callbacks, and how a cache entry's code runs on the frame's arguments.
 * Built on the accessors of frame_pyXY.c and the public code-object API only. */
#include "minidynamo.h"

#define PARAM_FLAGS (CO_VARARGS | CO_VARKEYWORDS)

static PyTypeObject FrameInfoType;

static PyStructSequence_Field frame_info_fields[] = {
    {"f_code", "code object of the frame"},
    {"f_locals", "dict of bound arguments and closure variables"},
    {"f_globals", "globals of the frame"},
    {"f_builtins", "builtins of the frame"},
    {"f_func", "function being called"},
    {NULL, NULL},
};

static PyStructSequence_Desc frame_info_desc = {
    "minidynamo._C.FrameInfo",
    "The state of a function frame about to run, as seen by the eval-frame hook.",
    frame_info_fields,
    5,
};

int frame_init_types(PyObject *module)
{
    if (PyStructSequence_InitType2(&FrameInfoType, &frame_info_desc) < 0)
        return -1;
    Py_INCREF(&FrameInfoType);
    if (PyModule_AddObject(module, "FrameInfo", (PyObject *)&FrameInfoType) < 0) {
        Py_DECREF(&FrameInfoType);
        return -1;
    }
    return 0;
}

static Py_ssize_t positional_slots(PyCodeObject *co)
{
    return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) != 0) +
           ((co->co_flags & CO_VARKEYWORDS) != 0);
}

/* The hook sees a frame before its first instruction, so COPY_FREE_VARS and MAKE_CELL have not run:
 * free variables are read from the function's closure, and an argument that is also a cell still
 * holds its plain value. */
PyObject *frame_local(struct _PyInterpreterFrame *f, Py_ssize_t slot)
{
    PyCodeObject *co = frame_code(f);
    if (slot < 0 || slot >= co->co_nlocalsplus)
        return NULL;
    Py_ssize_t first_free = co->co_nlocalsplus - co->co_nfreevars;
    PyObject *closure = frame_function(f)->func_closure;
    if (slot >= first_free && closure != NULL)
        return PyCell_GET(PyTuple_GET_ITEM(closure, slot - first_free));
    return frame_slot(f, (int)slot);
}

PyObject *frame_locals(struct _PyInterpreterFrame *f)
{
    PyCodeObject *co = frame_code(f);
    PyObject *locals = PyDict_New();
    if (locals == NULL)
        return NULL;
    for (int i = 0; i < co->co_nlocalsplus; i++) {
        PyObject *value = frame_local(f, i);
        if (value == NULL)
            continue;
        if (PyDict_SetItem(locals, PyTuple_GET_ITEM(co->co_localsplusnames, i), value) < 0) {
            Py_DECREF(locals);
            return NULL;
        }
    }
    return locals;
}

PyObject *frame_info(struct _PyInterpreterFrame *f)
{
    PyObject *locals = frame_locals(f);
    if (locals == NULL)
        return NULL;
    PyObject *info = PyStructSequence_New(&FrameInfoType);
    if (info == NULL) {
        Py_DECREF(locals);
        return NULL;
    }
    PyStructSequence_SET_ITEM(info, 0, Py_NewRef(frame_code(f)));
    PyStructSequence_SET_ITEM(info, 1, locals);
    PyStructSequence_SET_ITEM(info, 2, Py_NewRef(frame_globals(f)));
    PyStructSequence_SET_ITEM(info, 3, Py_NewRef(frame_builtins(f)));
    PyStructSequence_SET_ITEM(info, 4, Py_NewRef(frame_function(f)));
    return info;
}

static int same_names(PyCodeObject *a, int a_start, PyCodeObject *b, int b_start, int n)
{
    for (int i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(a->co_localsplusnames, a_start + i);
        PyObject *y = PyTuple_GET_ITEM(b->co_localsplusnames, b_start + i);
        if (PyUnicode_Compare(x, y) != 0)
            return 0;
    }
    return 1;
}

/* The transformed code is run with the original's argument slots and closure. */
static int same_layout(PyCodeObject *orig, PyCodeObject *code)
{
    int nfree = orig->co_nfreevars;
    if (positional_slots(orig) != positional_slots(code) || nfree != code->co_nfreevars)
        return 0;
    return same_names(orig, 0, code, 0, (int)positional_slots(orig)) &&
           same_names(orig, orig->co_nlocalsplus - nfree, code, code->co_nlocalsplus - nfree, nfree);
}

PyObject *code_flatten(PyCodeObject *orig, PyObject *code, Py_ssize_t *nargs)
{
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "transformed code must be a code object, not %.100s",
                     Py_TYPE(code)->tp_name);
        return NULL;
    }
    PyCodeObject *co = (PyCodeObject *)code;
    if (!same_layout(orig, co)) {
        PyErr_Format(PyExc_ValueError,
                     "transformed code for %U must keep the parameters and free variables of "
                     "the original, in the same order", orig->co_qualname);
        return NULL;
    }
    *nargs = positional_slots(co);
    PyObject *replace = PyObject_GetAttrString(code, "replace");
    if (replace == NULL)
        return NULL;
    PyObject *kwargs = Py_BuildValue("{s:n,s:i,s:i,s:i}", "co_argcount", *nargs, "co_posonlyargcount",
                                     0, "co_kwonlyargcount", 0, "co_flags",
                                     co->co_flags & ~PARAM_FLAGS);
    PyObject *flat = NULL;
    if (kwargs != NULL) {
        PyObject *empty = PyTuple_New(0);
        if (empty != NULL) {
            flat = PyObject_Call(replace, empty, kwargs);
            Py_DECREF(empty);
        }
        Py_DECREF(kwargs);
    }
    Py_DECREF(replace);
    return flat;
}

/* The entry keeps the function it built last; it is reused while the caller's globals
 * and closure are the same objects (the function holds both, so identity is sound). */
static PyObject *entry_function(CacheEntry *entry, struct _PyInterpreterFrame *f)
{
    PyFunctionObject *cached = (PyFunctionObject *)entry->func;
    PyObject *globals = frame_globals(f);
    PyObject *closure = frame_function(f)->func_closure;
    if (cached != NULL && cached->func_globals == globals && cached->func_closure == closure)
        return entry->func;
    PyObject *fn = PyFunction_New(entry->code, globals);
    if (fn == NULL)
        return NULL;
    if (closure != NULL && PyFunction_SetClosure(fn, closure) < 0) {
        Py_DECREF(fn);
        return NULL;
    }
    Py_XSETREF(entry->func, fn);
    return fn;
}

PyObject *frame_call_entry(CacheEntry *entry, struct _PyInterpreterFrame *f)
{
    PyObject *fn = entry_function(entry, f);
    if (fn == NULL)
        return NULL;
    Py_INCREF(fn);
    PyObject *result = frame_vectorcall(fn, f, entry->nargs);
    Py_DECREF(fn);
    return result;
}
