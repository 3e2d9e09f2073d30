/* Shared declarations of the minidynamo C core.
 *
 * Only frame_py311.c knows the interpreter's frame layout; everything else sees
 * `struct _PyInterpreterFrame` as opaque, so another CPython version is one more
 * frame_pyXYZ.c beside it. */
#ifndef MINIDYNAMO_H
#define MINIDYNAMO_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

/* ---- frame_py311.c: the version-specific frame layer ---- */

PyCodeObject *frame_code(struct _PyInterpreterFrame *f);      /* borrowed */
int frame_is_convertible(struct _PyInterpreterFrame *f);      /* fresh function frame, not a generator */
PyObject *frame_locals(struct _PyInterpreterFrame *f);        /* new dict of bound locals and free vars */
PyObject *frame_local(struct _PyInterpreterFrame *f, Py_ssize_t slot); /* borrowed; NULL if unbound */
PyObject *frame_globals(struct _PyInterpreterFrame *f);       /* borrowed */
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
