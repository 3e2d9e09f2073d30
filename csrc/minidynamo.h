/* Shared declarations of the minidynamo C core.
 *
 * Only the version layer (frame_pyXY.c, one per CPython version) knows the interpreter's frame
 * layout and includes CPython's internal headers; everything else sees `struct _PyInterpreterFrame`
 * as opaque, so another CPython version is one more frame_pyXY.c beside it. */
#ifndef MINIDYNAMO_H
#define MINIDYNAMO_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifdef Py_GIL_DISABLED
#error "minidynamo's C core relies on the GIL; free-threaded CPython builds are not supported"
#endif

/* Public C API under the names of CPython 3.13; 3.11 spells them differently. */
#if PY_VERSION_HEX < 0x030C0000
#define PyUnstable_Eval_RequestCodeExtraIndex _PyEval_RequestCodeExtraIndex
#define PyUnstable_Code_GetExtra _PyCode_GetExtra
#define PyUnstable_Code_SetExtra _PyCode_SetExtra
#endif
#if PY_VERSION_HEX < 0x030D0000
#define PyObject_GetOptionalAttr _PyObject_LookupAttr
#define PyLong_AsInt _PyLong_AsInt
static inline int PyWeakref_GetRef(PyObject *ref, PyObject **target)
{
    PyObject *obj = PyWeakref_GetObject(ref);
    *target = obj == NULL || obj == Py_None ? NULL : Py_NewRef(obj);
    return obj == NULL ? -1 : *target != NULL;
}
#endif

struct _PyInterpreterFrame;

/* ---- cache.c: per-code cache entries stored in co_extra ---- */

typedef struct CacheEntry {
    PyObject *check_fn;       /* a GuardSet checked on the frame's slots, or a callable taking the locals dict */
    PyObject *code;           /* transformed code, parameters flattened to positional */
    PyObject *func;           /* function for `code` built for the last caller, or NULL */
    PyObject *owner;          /* the callback that compiled it: only that callback's frames use it */
    Py_ssize_t nargs;         /* positional slots of `code` */
    struct CacheEntry *next;
} CacheEntry;

typedef enum { SKIP_NONE = 0, SKIP_UNTIL_RESET = 1, SKIP_ALWAYS = 2 } SkipKind;

typedef struct CodeExtra {
    struct CodeExtra *prev, *next; /* ring of all extras, for reset() */
    CacheEntry *head;
    int n_entries;
    SkipKind skip;
    int warned_limit;
} CodeExtra;

int cache_init(void);
CodeExtra *cache_lookup(PyCodeObject *code);        /* NULL when the code has none */
CodeExtra *cache_get_or_create(PyCodeObject *code); /* NULL with an exception set */
int cache_set_skip(PyCodeObject *code, SkipKind kind);
int cache_prepend(CodeExtra *extra, PyObject *check_fn, PyObject *code, PyObject *owner, Py_ssize_t nargs);
void cache_move_to_front(CodeExtra *extra, CacheEntry *prev, CacheEntry *entry);
CacheEntry *cache_remove(CodeExtra *extra, CacheEntry *prev, CacheEntry *entry); /* returns the next */
void cache_clear(CodeExtra *extra);
void cache_reset_all(void);
int cache_drop_functions(void);
void cache_live_counts(Py_ssize_t *extras, Py_ssize_t *entries);

/* ---- frame_pyXY.c: the version layer, all that depends on one CPython version's internals ---- */

PyCodeObject *frame_code(struct _PyInterpreterFrame *f);         /* borrowed */
PyFunctionObject *frame_function(struct _PyInterpreterFrame *f); /* borrowed */
PyObject *frame_globals(struct _PyInterpreterFrame *f);          /* borrowed */
PyObject *frame_builtins(struct _PyInterpreterFrame *f);         /* borrowed */
PyObject *frame_slot(struct _PyInterpreterFrame *f, int i);      /* borrowed content of a slot; NULL if empty */
int frame_is_convertible(struct _PyInterpreterFrame *f);        /* fresh function frame, not a generator */
/* fn(*the frame's first nargs slots) */
PyObject *frame_vectorcall(PyObject *fn, struct _PyInterpreterFrame *f, Py_ssize_t nargs);
/* The hook did not hand the frame to the evaluator (it ran cached code, or failed first): clears and
 * pops the frame where the evaluator would have (from 3.12 on), or leaves that to the caller (3.11). */
void frame_finish(PyThreadState *ts, struct _PyInterpreterFrame *f);
/* Equal results for one dict object mean it was not modified in between. */
uint64_t dict_version(PyObject *dict);
/* 1 when the thread has used most of a limit on nested evaluator calls that the C stack's size does
 * not bound (3.13 counts them; 3.11 counts Python frames the same hooked or not; 3.14 measures the
 * stack itself). */
int c_recursion_low(PyThreadState *ts);

/* ---- frame.c: the version-neutral rest of the frame layer, built on the accessors above ---- */

PyObject *frame_locals(struct _PyInterpreterFrame *f);        /* new dict of bound locals and free vars */
PyObject *frame_local(struct _PyInterpreterFrame *f, Py_ssize_t slot); /* borrowed; NULL if unbound */
PyObject *frame_info(struct _PyInterpreterFrame *f);          /* new FrameInfo for the callback */
PyObject *frame_call_entry(CacheEntry *entry, struct _PyInterpreterFrame *f);
/* New reference to `code` with every parameter made positional, checked against `orig`'s layout.
 * Sets *nargs to the number of positional slots. */
PyObject *code_flatten(PyCodeObject *orig, PyObject *code, Py_ssize_t *nargs);
int frame_init_types(PyObject *module);

/* ---- eval_frame.c ---- */

/* Makes `callback` (a new reference, or NULL for None) this thread's callback and
 * returns the previous one (a reference the caller now owns, or NULL). */
PyObject *callback_swap(PyObject *callback);
int callback_check(PyObject *callback); /* -1 with TypeError unless None, False or callable */
size_t c_stack_left(void);              /* bytes of this thread's C stack below the caller */
/* Turns a pending Exception (not a BaseException such as KeyboardInterrupt) into the request to run
 * the frame of the cache entry being called again, eagerly from its start. */
void rerun_request(void);

/* ---- wrapper.c ---- */
int wrapper_init_type(PyObject *module);

/* ---- guards.c: compiled guard sets checked straight on the frame ---- */
int guards_init_types(PyObject *module);
int guardset_check(PyObject *guardset); /* is it a GuardSet? */
/* 1 pass, 0 fail, -1 error. Checks already passed in this `epoch` are skipped. */
int guardset_eval_frame(PyObject *guardset, struct _PyInterpreterFrame *f, unsigned long long epoch);
int guardset_valid(PyObject *guardset);
unsigned long long guards_next_epoch(void);
PyObject *guards_strict_equal(PyObject *self, PyObject *args); /* _C.strict_equal(a, b) */

#endif
