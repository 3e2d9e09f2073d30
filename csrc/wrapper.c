/* CallbackWrapper(fn, callback, rerun=False): calls fn with this thread's callback set to `callback`.
 *
 * This is what `optimize(...)(fn)` and `disable(fn)` return, and what generated code calls a compiled
 * graph through. Written in C so the wrapper adds no Python frame (and no packing of star-arguments)
 * to the cached path. With `rerun`, an Exception from fn asks for the calling frame to be run again
 * eagerly (see rerun_request). */
#include "minidynamo.h"

#include <structmember.h>

#define WRAPPER_STACK_RESERVE ((size_t)512 << 10)

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *callback; /* None, False or a callable */
    PyObject *dict;
    PyObject *weakreflist;
    vectorcallfunc vectorcall;
    int rerun;
} CallbackWrapper;

static PyObject *wrapper_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames)
{
    CallbackWrapper *w = (CallbackWrapper *)self;
    if (c_stack_left() < WRAPPER_STACK_RESERVE) { /* each call through a wrapper nests C calls */
        PyErr_SetString(PyExc_RecursionError, "maximum recursion depth exceeded (the C stack is nearly full)");
        return NULL;
    }
    PyObject *fn = Py_NewRef(w->fn);
    PyObject *callback = w->callback == Py_None ? NULL : Py_NewRef(w->callback);
    PyObject *previous = callback_swap(callback);
    PyObject *result = PyObject_Vectorcall(fn, args, nargsf, kwnames);
    PyObject *ours = callback_swap(previous);
    Py_XDECREF(ours);
    Py_DECREF(fn);
    if (result == NULL && w->rerun)
        rerun_request();
    return result;
}

static PyObject *wrapper_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fn", "callback", "rerun", NULL};
    PyObject *fn, *callback;
    int rerun = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|p:CallbackWrapper", kwlist, &fn, &callback, &rerun))
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "CallbackWrapper needs a callable");
        return NULL;
    }
    if (callback_check(callback) < 0)
        return NULL;
    CallbackWrapper *w = (CallbackWrapper *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    w->fn = Py_NewRef(fn);
    w->callback = Py_NewRef(callback);
    w->vectorcall = wrapper_vectorcall;
    w->rerun = rerun;
    return (PyObject *)w;
}

static int wrapper_traverse(CallbackWrapper *w, visitproc visit, void *arg)
{
    Py_VISIT(w->fn);
    Py_VISIT(w->callback);
    Py_VISIT(w->dict);
    return 0;
}

static int wrapper_clear(CallbackWrapper *w)
{
    Py_CLEAR(w->fn);
    Py_CLEAR(w->callback);
    Py_CLEAR(w->dict);
    return 0;
}

static void wrapper_dealloc(CallbackWrapper *w)
{
    PyObject_GC_UnTrack(w);
    if (w->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)w);
    wrapper_clear(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* Bound like a function, so decorated methods receive self. */
static PyObject *wrapper_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyMemberDef wrapper_members[] = {
    {"fn", T_OBJECT, offsetof(CallbackWrapper, fn), READONLY, "the wrapped callable"},
    {"callback", T_OBJECT, offsetof(CallbackWrapper, callback), READONLY,
     "the callback set while it runs"},
    {"rerun", T_INT, offsetof(CallbackWrapper, rerun), READONLY,
     "whether an Exception from fn re-runs the calling frame eagerly"},
    {"__dictoffset__", T_PYSSIZET, offsetof(CallbackWrapper, dict), READONLY},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(CallbackWrapper, weakreflist), READONLY},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CallbackWrapper, vectorcall), READONLY},
    {NULL},
};

static PyGetSetDef wrapper_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict},
    {NULL},
};

static PyTypeObject CallbackWrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minidynamo._C.CallbackWrapper",
    .tp_basicsize = sizeof(CallbackWrapper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "CallbackWrapper(fn, callback, rerun=False): call fn with this thread's eval-frame callback set.",
    .tp_new = wrapper_new,
    .tp_dealloc = (destructor)wrapper_dealloc,
    .tp_traverse = (traverseproc)wrapper_traverse,
    .tp_clear = (inquiry)wrapper_clear,
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = wrapper_descr_get,
    .tp_members = wrapper_members,
    .tp_getset = wrapper_getset,
    .tp_dictoffset = offsetof(CallbackWrapper, dict),
    .tp_weaklistoffset = offsetof(CallbackWrapper, weakreflist),
    .tp_vectorcall_offset = offsetof(CallbackWrapper, vectorcall),
};

int wrapper_init_type(PyObject *module)
{
    if (PyType_Ready(&CallbackWrapperType) < 0)
        return -1;
    Py_INCREF(&CallbackWrapperType);
    if (PyModule_AddObject(module, "CallbackWrapper", (PyObject *)&CallbackWrapperType) < 0) {
        Py_DECREF(&CallbackWrapperType);
        return -1;
    }
    return 0;
}
