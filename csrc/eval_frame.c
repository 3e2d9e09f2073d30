/* The PEP 523 hook, the thread-local callback and the Python-facing module.
 *
 * Callback per thread: NULL (None) = off, Py_False = run cached code only,
 * a callable = compile on a miss. The hook is installed only while some thread has a
 * callback, since any installed hook slows every Python call in the process. */
#include "minidynamo.h"

#include <pthread.h>
#include <stdint.h>

static _Thread_local PyObject *tls_callback = NULL; /* strong reference or NULL */
static _Thread_local int tls_busy = 0;             /* inside a callback or guard check */
static int n_active_threads = 0;
static _PyFrameEvalFunction previous_eval = NULL;
static int cache_size_limit = 8;
static PyObject *cache_limit_hook = NULL; /* called with the FrameInfo when a code reaches the limit */
static int lookup_depth = 0;
static PyObject *RerunFrame = NULL; /* a BaseException, so no `except Exception` in the frame takes it */
static PyObject *rerun_hook = NULL; /* called with the graph's error before a frame is re-run eagerly */
/* Returns another frame hook's (torch._dynamo's) callback on this thread, None when it is off. */
static PyObject *foreign_callback_getter = NULL;

static struct {
    unsigned long long frames, hits, misses, compiles, skips, limit_hits, reruns;
} stats;

static PyObject *custom_eval(PyThreadState *ts, struct _PyInterpreterFrame *f, int throwflag);

/* Returned instead of a result for a frame that the evaluator is to run after all: from CPython 3.12
 * on, whoever does not hand a frame to the evaluator clears and pops it (frame_finish). */
static PyObject evaluate_marker;
#define EVALUATE (&evaluate_marker)

/* ---- the C stack ----
 * With a frame-evaluation hook installed, CPython no longer inlines Python-to-Python calls:
 * each one nests a C call of the evaluator. Deep recursion that eager code runs in a few
 * megabytes of C stack would then overflow it, or spend a count of nested evaluator calls
 * (c_recursion_low). Near the end of the thread's stack or of that count, frames run
 * with the hook uninstalled (calls inline again, nothing is converted), and the hook comes back
 * when they return. */
#define STACK_RESERVE ((size_t)2 << 20)
static _Thread_local char *stack_lowest = NULL; /* this thread's stack bottom (it grows down) */
static _Thread_local int stack_known = 0;

size_t c_stack_left(void)
{
    char here;
    if (!stack_known) {
        pthread_attr_t attr;
        void *addr;
        size_t size;
        stack_known = 1;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) == 0)
                stack_lowest = (char *)addr;
            pthread_attr_destroy(&attr);
        }
    }
    if (stack_lowest == NULL || &here < stack_lowest)
        return SIZE_MAX;
    return (size_t)(&here - stack_lowest);
}

static void ensure_installed(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current != custom_eval) {
        previous_eval = current;
        _PyInterpreterState_SetEvalFrameFunc(interp, custom_eval);
    }
}

static void uninstall(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == custom_eval)
        _PyInterpreterState_SetEvalFrameFunc(interp, previous_eval);
}

/* ---- the hook ---- */

static int call_check(PyObject *check_fn, struct _PyInterpreterFrame *f, PyObject **locals)
{
    if (*locals == NULL && (*locals = frame_locals(f)) == NULL)
        return -1;
    PyObject *r = PyObject_CallOneArg(check_fn, *locals);
    int ok = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    return ok;
}

/* Returns the first entry of `callback` whose guards accept the frame, moved to the front, and
 * drops entries whose guards can never pass again. NULL with *error set when a check_fn raised. */
static CacheEntry *find_entry(CodeExtra *extra, struct _PyInterpreterFrame *f, PyObject *callback,
                              int *error)
{
    PyObject *locals = NULL; /* built only for check functions written in Python */
    unsigned long long epoch = guards_next_epoch();
    CacheEntry *prev = NULL, *found = NULL, *e = extra->head;
    lookup_depth++;
    while (e != NULL) {
        if (callback != Py_False && e->owner != callback) {
            prev = e;
            e = e->next;
            continue;
        }
        int ok;
        if (guardset_check(e->check_fn)) {
            ok = guardset_eval_frame(e->check_fn, f, epoch);
            if (ok == 0 && !guardset_valid(e->check_fn)) {
                e = cache_remove(extra, prev, e);
                continue;
            }
        } else {
            ok = call_check(e->check_fn, f, &locals);
        }
        if (ok < 0) {
            *error = 1;
            break;
        }
        if (ok) {
            cache_move_to_front(extra, prev, e);
            found = e;
            break;
        }
        prev = e;
        e = e->next;
    }
    lookup_depth--;
    Py_XDECREF(locals);
    return found;
}

/* Once per code object: the Python hook (which can say which guard failed) or a plain warning.
 * The warning is never raised into the call: one that a filter turns into an error is dropped
 * (a KeyboardInterrupt meanwhile is not). */
static int warn_cache_limit(CodeExtra *extra, struct _PyInterpreterFrame *f)
{
    PyCodeObject *code = frame_code(f);
    stats.limit_hits++;
    if (extra->warned_limit)
        return 0;
    extra->warned_limit = 1;
    tls_busy = 1;
    if (cache_limit_hook != NULL) {
        PyObject *info = frame_info(f);
        PyObject *r = info != NULL ? PyObject_CallOneArg(cache_limit_hook, info) : NULL;
        Py_XDECREF(info);
        Py_XDECREF(r);
    } else {
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "minidynamo: function '%U' (%U:%d) reached the cache size limit "
                         "(%d entries); it now runs without compiling",
                         code->co_qualname, code->co_filename, code->co_firstlineno, cache_size_limit);
    }
    tls_busy = 0;
    if (PyErr_Occurred() == NULL || PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

/* Installs the callback's GuardedCode (an object with .code and .check_fn) as a new entry. */
static CacheEntry *install_entry(PyCodeObject *code, PyObject *guarded, PyObject *owner)
{
    PyObject *new_code = PyObject_GetAttrString(guarded, "code");
    PyObject *check_fn = new_code ? PyObject_GetAttrString(guarded, "check_fn") : NULL;
    PyObject *flat = NULL;
    CacheEntry *entry = NULL;
    Py_ssize_t nargs = 0;
    if (check_fn == NULL)
        goto done;
    if (!PyCallable_Check(check_fn)) {
        PyErr_SetString(PyExc_TypeError, "GuardedCode.check_fn must be callable");
        goto done;
    }
    flat = code_flatten(code, new_code, &nargs);
    if (flat == NULL || cache_set_skip((PyCodeObject *)flat, SKIP_ALWAYS) < 0)
        goto done;
    CodeExtra *extra = cache_get_or_create(code);
    if (extra == NULL || cache_prepend(extra, check_fn, flat, owner, nargs) < 0)
        goto done;
    entry = extra->head;
done:
    Py_XDECREF(flat);
    Py_XDECREF(check_fn);
    Py_XDECREF(new_code);
    return entry;
}

void rerun_request(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    PyErr_SetObject(RerunFrame, value); /* RerunFrame(error): kept for the rerun hook */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Takes the pending RerunFrame and hands the graph's error to the rerun hook, if one is set. */
static int consume_rerun(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    int rc = 0;
    if (rerun_hook != NULL && value != NULL) {
        PyObject *args = PyObject_GetAttrString(value, "args");
        PyObject *error = args != NULL && PyTuple_Check(args) && PyTuple_GET_SIZE(args) == 1
                              ? PyTuple_GET_ITEM(args, 0) : Py_None;
        PyObject *r = args != NULL ? PyObject_CallOneArg(rerun_hook, error) : NULL;
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
        Py_XDECREF(args);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return rc;
}

/* Runs a cache entry's code on the frame's arguments. A compiled graph that raised before its frame
 * did anything else visible asks (rerun_request) for the frame to run eagerly instead: what eager
 * does before the error (side effects, an except clause around it) then happens as in eager. */
static PyObject *run_entry(CacheEntry *entry, struct _PyInterpreterFrame *f)
{
    PyObject *result = frame_call_entry(entry, f);
    if (result != NULL || !PyErr_ExceptionMatches(RerunFrame))
        return result;
    stats.reruns++;
    return consume_rerun() < 0 ? NULL : EVALUATE;
}

/* 1 when another hook's callback is on: the frame is inside a torch.compile'd call, whose hook
 * converts it (it would convert our callback's frames and our cached code too): the frame runs as
 * that hook gives it. Asked only while another hook is in the chain (above or below ours). */
static int foreign_hook_converting(PyThreadState *ts)
{
    if (foreign_callback_getter == NULL || (previous_eval == _PyEval_EvalFrameDefault &&
                                            _PyInterpreterState_GetEvalFrameFunc(ts->interp) == custom_eval))
        return 0;
    PyObject *foreign = PyObject_CallNoArgs(foreign_callback_getter);
    if (foreign == NULL)
        return -1;
    int on = foreign != Py_None;
    Py_DECREF(foreign);
    return on;
}

static PyObject *compile_and_run(struct _PyInterpreterFrame *f, PyObject *callback)
{
    PyCodeObject *code = frame_code(f);
    PyObject *info = frame_info(f);
    if (info == NULL)
        return NULL;
    stats.compiles++;
    Py_INCREF(callback);
    tls_busy = 1;
    PyObject *guarded = PyObject_CallOneArg(callback, info);
    tls_busy = 0;
    Py_DECREF(info);
    if (guarded == NULL) {
        Py_DECREF(callback);
        return NULL;
    }
    if (guarded == Py_None) {
        Py_DECREF(guarded);
        Py_DECREF(callback);
        stats.skips++;
        return cache_set_skip(code, SKIP_UNTIL_RESET) < 0 ? NULL : EVALUATE;
    }
    CacheEntry *entry = install_entry(code, guarded, callback);
    Py_DECREF(guarded);
    Py_DECREF(callback);
    return entry == NULL ? NULL : run_entry(entry, f);
}

static PyObject *eval_unhooked(PyThreadState *ts, struct _PyInterpreterFrame *f, int throwflag)
{
    uninstall();
    PyObject *result = previous_eval(ts, f, throwflag);
    if (n_active_threads > 0)
        ensure_installed();
    return result;
}

/* Runs a cached entry for a fresh function frame, or compiles one. Returns the frame's result, NULL
 * with an error, or EVALUATE. */
static PyObject *convert(PyThreadState *ts, struct _PyInterpreterFrame *f, PyObject *callback, CodeExtra *extra)
{
    int foreign = foreign_hook_converting(ts);
    if (foreign != 0)
        return foreign < 0 ? NULL : EVALUATE;
    stats.frames++;
    if (extra != NULL && extra->head != NULL) {
        int error = 0;
        tls_busy = 1;
        CacheEntry *hit = find_entry(extra, f, callback, &error);
        tls_busy = 0;
        if (error)
            return NULL;
        if (hit != NULL) {
            stats.hits++;
            return run_entry(hit, f);
        }
    }
    stats.misses++;
    if (callback == Py_False)
        return EVALUATE;
    if (extra != NULL && extra->n_entries >= cache_size_limit)
        return warn_cache_limit(extra, f) < 0 ? NULL : EVALUATE;
    return compile_and_run(f, callback);
}

static PyObject *custom_eval(PyThreadState *ts, struct _PyInterpreterFrame *f, int throwflag)
{
    if (c_stack_left() < STACK_RESERVE || c_recursion_low(ts))
        return eval_unhooked(ts, f, throwflag);
    PyObject *callback = tls_callback;
    /* ts->tracing: the frame belongs to an audit hook, trace or profile function or sys.monitoring
     * callback, which CPython runs outside the traced program (an audit hook also runs inside our
     * own code-object creation); converting it would recurse. */
    if (callback == NULL || tls_busy || ts->tracing || throwflag || cache_size_limit == 0)
        return previous_eval(ts, f, throwflag);
    CodeExtra *extra = cache_lookup(frame_code(f));
    if ((extra != NULL && extra->skip != SKIP_NONE) || !frame_is_convertible(f))
        return previous_eval(ts, f, throwflag);
    PyObject *result = convert(ts, f, callback, extra);
    if (result == EVALUATE)
        return previous_eval(ts, f, 0);
    frame_finish(ts, f);
    return result;
}

/* ---- module functions ---- */

PyObject *callback_swap(PyObject *callback)
{
    PyObject *previous = tls_callback;
    int was_active = previous != NULL;
    tls_callback = callback;
    if (callback != NULL) {
        if (!was_active)
            n_active_threads++;
        ensure_installed();
    } else if (was_active && --n_active_threads == 0) {
        uninstall();
    }
    return previous;
}

int callback_check(PyObject *callback)
{
    if (callback != Py_None && callback != Py_False && !PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "callback must be None, False or callable");
        return -1;
    }
    return 0;
}

static PyObject *set_eval_frame(PyObject *self, PyObject *callback)
{
    if (callback_check(callback) < 0)
        return NULL;
    PyObject *previous = callback_swap(callback == Py_None ? NULL : Py_NewRef(callback));
    return previous != NULL ? previous : Py_NewRef(Py_None);
}

static PyObject *get_eval_frame(PyObject *self, PyObject *unused)
{
    return Py_NewRef(tls_callback != NULL ? tls_callback : Py_None);
}

static PyObject *hook_installed(PyObject *self, PyObject *unused)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    return PyBool_FromLong(_PyInterpreterState_GetEvalFrameFunc(interp) == custom_eval);
}

static PyCodeObject *code_arg(PyObject *obj)
{
    if (!PyCode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "expected a code object, not %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return (PyCodeObject *)obj;
}

static PyObject *skip_code(PyObject *self, PyObject *obj)
{
    PyCodeObject *code = code_arg(obj);
    if (code == NULL || cache_set_skip(code, SKIP_ALWAYS) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *is_skipped(PyObject *self, PyObject *obj)
{
    PyCodeObject *code = code_arg(obj);
    if (code == NULL)
        return NULL;
    CodeExtra *extra = cache_lookup(code);
    return PyBool_FromLong(extra != NULL && extra->skip != SKIP_NONE);
}

static PyObject *get_cache_entries(PyObject *self, PyObject *obj)
{
    PyCodeObject *code = code_arg(obj);
    if (code == NULL)
        return NULL;
    PyObject *result = PyList_New(0);
    CodeExtra *extra = cache_lookup(code);
    if (result == NULL || extra == NULL)
        return result;
    for (CacheEntry *e = extra->head; e != NULL; e = e->next) {
        PyObject *pair = PyTuple_Pack(3, e->check_fn, e->code, e->owner);
        if (pair == NULL || PyList_Append(result, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return result;
}

static int refuse_during_lookup(void)
{
    if (lookup_depth > 0) {
        PyErr_SetString(PyExc_RuntimeError, "minidynamo: caches cannot be cleared from a guard");
        return -1;
    }
    return 0;
}

static PyObject *clear_cache(PyObject *self, PyObject *obj)
{
    PyCodeObject *code = code_arg(obj);
    if (code == NULL || refuse_during_lookup() < 0)
        return NULL;
    CodeExtra *extra = cache_lookup(code);
    if (extra != NULL)
        cache_clear(extra);
    Py_RETURN_NONE;
}

static PyObject *reset(PyObject *self, PyObject *unused)
{
    if (refuse_during_lookup() < 0)
        return NULL;
    cache_reset_all();
    Py_RETURN_NONE;
}

/* Drop the entries of a code object whose guard sets can never pass again. */
static PyObject *drop_invalid_entries(PyObject *self, PyObject *obj)
{
    PyCodeObject *code = code_arg(obj);
    if (code == NULL)
        return NULL;
    CodeExtra *extra = cache_lookup(code);
    if (extra == NULL || lookup_depth > 0) /* a lookup in progress drops them itself */
        Py_RETURN_NONE;
    CacheEntry *prev = NULL, *e = extra->head;
    while (e != NULL) {
        if (guardset_check(e->check_fn) && !guardset_valid(e->check_fn)) {
            e = cache_remove(extra, prev, e);
        } else {
            prev = e;
            e = e->next;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *drop_function_caches(PyObject *self, PyObject *unused)
{
    if (cache_drop_functions() < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *set_cache_size_limit(PyObject *self, PyObject *arg)
{
    long limit = PyLong_AsLong(arg);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if (limit < 0 || limit > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "cache size limit must be a non-negative int");
        return NULL;
    }
    cache_size_limit = (int)limit;
    Py_RETURN_NONE;
}

/* Sets a hook slot; returns the previous hook (None when unset). */
static PyObject *set_hook(PyObject **slot, PyObject *hook)
{
    if (hook != Py_None && !PyCallable_Check(hook)) {
        PyErr_SetString(PyExc_TypeError, "a hook must be callable or None");
        return NULL;
    }
    PyObject *previous = *slot != NULL ? *slot : Py_NewRef(Py_None);
    *slot = hook == Py_None ? NULL : Py_NewRef(hook);
    return previous;
}

static PyObject *set_cache_limit_hook(PyObject *self, PyObject *hook)
{
    return set_hook(&cache_limit_hook, hook);
}

static PyObject *set_rerun_hook(PyObject *self, PyObject *hook)
{
    return set_hook(&rerun_hook, hook);
}

static PyObject *set_foreign_callback_getter(PyObject *self, PyObject *getter)
{
    return set_hook(&foreign_callback_getter, getter);
}

static PyObject *get_cache_size_limit(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(cache_size_limit);
}

static PyObject *get_stats(PyObject *self, PyObject *unused)
{
    Py_ssize_t extras, entries;
    cache_live_counts(&extras, &entries);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:n,s:n}", "frames", stats.frames, "hits",
                         stats.hits, "misses", stats.misses, "compiles", stats.compiles, "skips",
                         stats.skips, "limit_hits", stats.limit_hits, "reruns", stats.reruns,
                         "live_code_extras", extras, "live_entries", entries);
}

static PyObject *reset_stats(PyObject *self, PyObject *unused)
{
    memset(&stats, 0, sizeof(stats));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_eval_frame", set_eval_frame, METH_O,
     "Set this thread's callback (None, False or callable); returns the previous one."},
    {"get_eval_frame", get_eval_frame, METH_NOARGS, "This thread's callback."},
    {"hook_installed", hook_installed, METH_NOARGS, "Whether the eval-frame hook is installed."},
    {"skip_code", skip_code, METH_O, "Never convert frames of this code object."},
    {"is_skipped", is_skipped, METH_O, "Whether frames of this code object are never converted."},
    {"get_cache_entries", get_cache_entries, METH_O,
     "The (check_fn, code, owner callback) cache entries of a code object, most recently used first."},
    {"clear_cache", clear_cache, METH_O, "Drop the cache entries of one code object."},
    {"reset", reset, METH_NOARGS, "Drop every cache entry and every skip mark made by callbacks."},
    {"drop_invalid_entries", drop_invalid_entries, METH_O,
     "Drop the entries of a code object whose guards can never pass again."},
    {"drop_function_caches", drop_function_caches, METH_NOARGS,
     "Release the function objects cached on entries (rebuilt on demand)."},
    {"set_cache_size_limit", set_cache_size_limit, METH_O, "Entries per code object."},
    {"get_cache_size_limit", get_cache_size_limit, METH_NOARGS, "Entries per code object."},
    {"set_cache_limit_hook", set_cache_limit_hook, METH_O,
     "Call hook(frame_info) (instead of warning) the first time a code object reaches the limit; "
     "returns the previous hook."},
    {"set_rerun_hook", set_rerun_hook, METH_O,
     "Call hook(error) with a compiled graph's error each time its frame is re-run eagerly (None: off); "
     "returns the previous hook."},
    {"set_foreign_callback_getter", set_foreign_callback_getter, METH_O,
     "getter() returns another frame hook's callback on this thread (None: off); while it is on, "
     "frames are not compiled; returns the previous getter."},
    {"stats", get_stats, METH_NOARGS, "Counters of the hook."},
    {"strict_equal", guards_strict_equal, METH_VARARGS,
     "The equality EQUALS_MATCH guards check: same types element by element, floats bit for bit."},
    {"reset_stats", reset_stats, METH_NOARGS, "Zero the counters of the hook."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "minidynamo._C",
                                        "minidynamo's eval-frame hook and code cache.", -1,
                                        methods};

PyMODINIT_FUNC PyInit__C(void)
{
    if (cache_init() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (frame_init_types(module) < 0 || wrapper_init_type(module) < 0 || guards_init_types(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    RerunFrame = PyErr_NewExceptionWithDoc("minidynamo._C.RerunFrame",
                                           "Internal: the frame's compiled graph raised; run the frame eagerly.",
                                           PyExc_BaseException, NULL);
    if (RerunFrame == NULL || PyModule_AddObjectRef(module, "RerunFrame", RerunFrame) < 0) {
        Py_CLEAR(RerunFrame);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
