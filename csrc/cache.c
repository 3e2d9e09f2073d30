/* Cache entries kept per code object in co_extra.
 *
 * Every CodeExtra also sits on one global ring so that reset() and the garbage
 * collector hook can reach all of them. The free function registered with
 * PyUnstable_Eval_RequestCodeExtraIndex runs when a code object dies (and when its slot is
 * overwritten), which frees the entries and unlinks the extra. */
#include "minidynamo.h"

static Py_ssize_t extra_index = -1;
static CodeExtra ring = {&ring, &ring, NULL, 0, SKIP_NONE, 0};
static Py_ssize_t live_extras = 0, live_entries = 0;

void cache_live_counts(Py_ssize_t *extras, Py_ssize_t *entries)
{
    *extras = live_extras;
    *entries = live_entries;
}

static void entry_free_chain(CacheEntry *e)
{
    while (e != NULL) {
        CacheEntry *next = e->next;
        Py_XDECREF(e->check_fn);
        Py_XDECREF(e->code);
        Py_XDECREF(e->func);
        Py_XDECREF(e->owner);
        PyMem_Free(e);
        live_entries--;
        e = next;
    }
}

static void extra_free(void *p)
{
    CodeExtra *extra = (CodeExtra *)p;
    if (extra == NULL)
        return;
    extra->prev->next = extra->next;
    extra->next->prev = extra->prev;
    CacheEntry *head = extra->head;
    PyMem_Free(extra);
    live_extras--;
    entry_free_chain(head);
}

int cache_init(void)
{
    extra_index = PyUnstable_Eval_RequestCodeExtraIndex(extra_free);
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "minidynamo: no co_extra index available");
        return -1;
    }
    return 0;
}

CodeExtra *cache_lookup(PyCodeObject *code)
{
    void *extra = NULL;
    if (PyUnstable_Code_GetExtra((PyObject *)code, extra_index, &extra) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return (CodeExtra *)extra;
}

CodeExtra *cache_get_or_create(PyCodeObject *code)
{
    CodeExtra *extra = cache_lookup(code);
    if (extra != NULL)
        return extra;
    extra = PyMem_Calloc(1, sizeof(CodeExtra));
    if (extra == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    live_extras++;
    extra->next = ring.next;
    extra->prev = &ring;
    ring.next->prev = extra;
    ring.next = extra;
    if (PyUnstable_Code_SetExtra((PyObject *)code, extra_index, extra) < 0) {
        extra_free(extra);
        return NULL;
    }
    return extra;
}

int cache_set_skip(PyCodeObject *code, SkipKind kind)
{
    CodeExtra *extra = cache_get_or_create(code);
    if (extra == NULL)
        return -1;
    if (extra->skip < kind)
        extra->skip = kind;
    return 0;
}

int cache_prepend(CodeExtra *extra, PyObject *check_fn, PyObject *code, PyObject *owner, Py_ssize_t nargs)
{
    CacheEntry *e = PyMem_Calloc(1, sizeof(CacheEntry));
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    live_entries++;
    e->check_fn = Py_NewRef(check_fn);
    e->code = Py_NewRef(code);
    e->owner = Py_NewRef(owner);
    e->nargs = nargs;
    e->next = extra->head;
    extra->head = e;
    extra->n_entries++;
    return 0;
}

void cache_move_to_front(CodeExtra *extra, CacheEntry *prev, CacheEntry *entry)
{
    if (prev == NULL)
        return;
    prev->next = entry->next;
    entry->next = extra->head;
    extra->head = entry;
}

CacheEntry *cache_remove(CodeExtra *extra, CacheEntry *prev, CacheEntry *entry)
{
    CacheEntry *next = entry->next;
    if (prev == NULL)
        extra->head = next;
    else
        prev->next = next;
    extra->n_entries--;
    entry->next = NULL;
    entry_free_chain(entry);
    return next;
}

/* Detach first, free afterwards: freeing runs arbitrary finalizers, which may free
 * other code objects and so unlink other extras. */
void cache_clear(CodeExtra *extra)
{
    CacheEntry *head = extra->head;
    extra->head = NULL;
    extra->n_entries = 0;
    extra->warned_limit = 0;
    entry_free_chain(head);
}

void cache_reset_all(void)
{
    CacheEntry *detached = NULL;
    for (CodeExtra *x = ring.next; x != &ring; x = x->next) {
        CacheEntry *tail = x->head;
        if (tail != NULL) {
            while (tail->next != NULL)
                tail = tail->next;
            tail->next = detached;
            detached = x->head;
        }
        x->head = NULL;
        x->n_entries = 0;
        x->warned_limit = 0;
        if (x->skip == SKIP_UNTIL_RESET)
            x->skip = SKIP_NONE;
    }
    entry_free_chain(detached);
}

/* Cached function objects hold the caller's globals and closure, which may refer back
 * to the code object: a cycle the collector cannot see through co_extra. Dropping them
 * before a full collection breaks such cycles; they are rebuilt on the next call. */
int cache_drop_functions(void)
{
    PyObject *dropped = PyList_New(0);
    if (dropped == NULL)
        return -1;
    for (CodeExtra *x = ring.next; x != &ring; x = x->next) {
        for (CacheEntry *e = x->head; e != NULL; e = e->next) {
            if (e->func == NULL)
                continue;
            int rc = PyList_Append(dropped, e->func);
            if (rc < 0) {
                Py_DECREF(dropped);
                return -1;
            }
            Py_CLEAR(e->func);
        }
    }
    Py_DECREF(dropped);
    return 0;
}
