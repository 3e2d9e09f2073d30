/* Guard sets evaluated in C, straight on the frame's local slots.
 *
 * A GuardSet has a table of accessors (how to reach a value: a local slot, a global, an
 * attribute or item of another accessor, a constant) and a list of (GuardCheck, accessor)
 * items. GuardCheck objects are shared between the entries of one code object; a check that
 * passed earlier in the same lookup (same epoch) is not evaluated again. Tensor properties are
 * checked by one call of torch's TensorGuards; rare guard kinds go to a Python fallback. */
#include "minidynamo.h"

#include <structmember.h>

enum { ACC_LOCAL, ACC_GLOBAL, ACC_ATTR, ACC_ITEM, ACC_CONST, ACC_DICT, ACC_GLOBALS };
enum { CHK_TYPE, CHK_ID, CHK_EQUALS, CHK_LEN, CHK_DICT_KEYS, CHK_ALIAS, CHK_CALL, CHK_HASATTR, CHK_CONTAINS, CHK_DISTINCT,
       CHK_BUILTINS, CHK_FUNCTION };

#define STACK_VALUES 64

static unsigned long long epoch_counter = 0;

unsigned long long guards_next_epoch(void)
{
    return ++epoch_counter;
}

/* ---- GuardCheck ---- */

typedef struct {
    PyObject_HEAD
    int kind;
    int weak;             /* CHK_ID, CHK_TYPE, CHK_FUNCTION: `expected` is a weak reference to the object */
    PyObject *expected;   /* type, object, value, tuple of keys, callable, attribute name or key, code, by kind */
    PyObject *expected2;  /* CHK_CALL: the result `expected()` must be; CHK_HASATTR, CHK_CONTAINS: present;
                           * CHK_BUILTINS: the objects of the names in `expected` */
    Py_ssize_t length;    /* CHK_LEN */
    PyObject *dicts[2];   /* CHK_BUILTINS: the globals and builtins last found unchanged (compared by address) */
    uint64_t versions[2]; /* and their dict_version() then */
    unsigned long long passed_epoch;
} GuardCheck;

static PyTypeObject GuardCheckType;

static PyObject *check_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"kind", "expected", "expected2", "length", "weak", NULL};
    int kind, weak = 0;
    PyObject *expected, *expected2 = Py_None;
    Py_ssize_t length = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iO|Onp:GuardCheck", names, &kind, &expected, &expected2,
                                     &length, &weak))
        return NULL;
    if (kind < CHK_TYPE || kind > CHK_FUNCTION) {
        PyErr_Format(PyExc_ValueError, "unknown guard check kind %d", kind);
        return NULL;
    }
    if (kind == CHK_BUILTINS && (!PyTuple_Check(expected) || !PyTuple_Check(expected2) ||
                                 PyTuple_GET_SIZE(expected) != PyTuple_GET_SIZE(expected2))) {
        PyErr_SetString(PyExc_TypeError, "a builtins check takes a tuple of names and a tuple of objects");
        return NULL;
    }
    if (weak && (!PyWeakref_Check(expected) || (kind != CHK_ID && kind != CHK_TYPE && kind != CHK_FUNCTION))) {
        PyErr_SetString(PyExc_TypeError, "a weak check is an identity, type or function check on a weakref");
        return NULL;
    }
    GuardCheck *c = (GuardCheck *)type->tp_alloc(type, 0);
    if (c == NULL)
        return NULL;
    c->kind = kind;
    c->weak = weak;
    c->expected = Py_NewRef(expected);
    c->expected2 = Py_NewRef(expected2);
    c->length = length;
    return (PyObject *)c;
}

static int check_traverse(GuardCheck *c, visitproc visit, void *arg)
{
    Py_VISIT(c->expected);
    Py_VISIT(c->expected2);
    return 0;
}

static int check_clear(GuardCheck *c)
{
    Py_CLEAR(c->expected);
    Py_CLEAR(c->expected2);
    return 0;
}

static void check_dealloc(GuardCheck *c)
{
    PyObject_GC_UnTrack(c);
    check_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMemberDef check_members[] = {
    {"kind", T_INT, offsetof(GuardCheck, kind), READONLY},
    {"expected", T_OBJECT, offsetof(GuardCheck, expected), READONLY},
    {NULL},
};

static PyTypeObject GuardCheckType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minidynamo._C.GuardCheck",
    .tp_basicsize = sizeof(GuardCheck),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "GuardCheck(kind, expected, expected2=None, length=0, weak=False): one check of a guard.",
    .tp_new = check_new,
    .tp_dealloc = (destructor)check_dealloc,
    .tp_traverse = (traverseproc)check_traverse,
    .tp_clear = (inquiry)check_clear,
    .tp_members = check_members,
};

static int dict_keys_equal(PyObject *dict, PyObject *keys)
{
    if (!PyDict_CheckExact(dict) || PyDict_GET_SIZE(dict) != PyTuple_GET_SIZE(keys))
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        PyObject *want = PyTuple_GET_ITEM(keys, i++);
        if (key != want) {
            int eq = PyObject_RichCompareBool(key, want, Py_EQ);
            if (eq <= 0)
                return eq;
        }
    }
    return 1;
}

static int strict_equal(PyObject *a, PyObject *b);

static int same_bits(double a, double b)
{
    return memcmp(&a, &b, sizeof(double)) == 0;
}

/* 1 when an element of `set` is strictly equal to `x`. */
static int set_holds_strictly(PyObject *set, PyObject *x)
{
    PyObject *it = PyObject_GetIter(set);
    if (it == NULL)
        return -1;
    int found = 0;
    PyObject *y;
    while (!found && (y = PyIter_Next(it)) != NULL) {
        found = strict_equal(x, y);
        Py_DECREF(y);
    }
    Py_DECREF(it);
    return found == 0 && PyErr_Occurred() ? -1 : found;
}

/* Sets hold no two equal elements, so each element of `a` has at most one equal element in `b`;
 * it must also be strictly equal. Guarded sets are small: the pairwise search stays cheap. */
static int sets_strict_equal(PyObject *a, PyObject *b)
{
    if (PySet_GET_SIZE(a) != PySet_GET_SIZE(b))
        return 0;
    PyObject *it = PyObject_GetIter(a);
    if (it == NULL)
        return -1;
    int eq = 1;
    PyObject *x;
    while (eq > 0 && (x = PyIter_Next(it)) != NULL) {
        eq = PySet_Contains(b, x);
        /* a str, bytes or None is equal only to an element of the same type and value */
        if (eq > 0 && !PyUnicode_CheckExact(x) && !PyBytes_CheckExact(x) && x != Py_None)
            eq = set_holds_strictly(b, x);
        Py_DECREF(x);
    }
    Py_DECREF(it);
    return eq > 0 && PyErr_Occurred() ? -1 : eq;
}

/* Equal values of exactly the same type, element by element: (2,) is not (2.0,), True is not 1,
 * and floats match bit for bit (0.0 is not -0.0; a nan matches the same nan). */
static int strict_equal(PyObject *a, PyObject *b)
{
    if (Py_TYPE(a) != Py_TYPE(b))
        return 0;
    if (a == b)
        return 1;
    if (PyFloat_CheckExact(a))
        return same_bits(PyFloat_AS_DOUBLE(a), PyFloat_AS_DOUBLE(b));
    if (PyComplex_CheckExact(a)) {
        Py_complex ca = PyComplex_AsCComplex(a), cb = PyComplex_AsCComplex(b);
        return same_bits(ca.real, cb.real) && same_bits(ca.imag, cb.imag);
    }
    if (PyTuple_Check(a)) {
        Py_ssize_t n = PyTuple_GET_SIZE(a);
        if (n != PyTuple_GET_SIZE(b))
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int eq = strict_equal(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i));
            if (eq <= 0)
                return eq;
        }
        return 1;
    }
    if (PyAnySet_Check(a))
        return sets_strict_equal(a, b);
    if (PySlice_Check(a)) {
        PySliceObject *sa = (PySliceObject *)a, *sb = (PySliceObject *)b;
        int eq = strict_equal(sa->start, sb->start);
        if (eq > 0)
            eq = strict_equal(sa->stop, sb->stop);
        return eq > 0 ? strict_equal(sa->step, sb->step) : eq;
    }
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* The target of an identity or type check, only compared by address; NULL (and *dead set) once a
 * weakly held one died. */
static PyObject *check_target(GuardCheck *c, int *dead)
{
    if (!c->weak)
        return c->expected;
    PyObject *target;
    if (PyWeakref_GetRef(c->expected, &target) > 0) {
        Py_DECREF(target); /* still alive: the reference dropped is the one just taken */
        return target;
    }
    *dead = 1;
    return NULL;
}

static int has_attr(PyObject *obj, PyObject *name)
{
    /* A name missing from a class is the common case: found absent along the (cached) MROs of the
     * class and its metaclass, without raising and clearing an AttributeError. */
    if (PyType_Check(obj) && Py_TYPE(obj)->tp_getattro == PyType_Type.tp_getattro && PyUnicode_CheckExact(name) &&
        _PyType_Lookup((PyTypeObject *)obj, name) == NULL && _PyType_Lookup(Py_TYPE(obj), name) == NULL)
        return 0;
    PyObject *attr;
    int found = PyObject_GetOptionalAttr(obj, name, &attr);
    Py_XDECREF(attr);
    return found;
}

/* None of the names is a global, and each builtin is still the object read. While neither dict was
 * written since the names were last found so, they are not looked up again. */
static int builtins_unchanged(GuardCheck *c, PyObject *globals, PyObject *builtins)
{
    if (globals == NULL || builtins == NULL || !PyDict_Check(globals) || !PyDict_Check(builtins))
        return 0;
    uint64_t versions[2] = {dict_version(globals), dict_version(builtins)};
    if (globals == c->dicts[0] && builtins == c->dicts[1] && versions[0] == c->versions[0] &&
        versions[1] == c->versions[1])
        return 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c->expected); i++) {
        PyObject *name = PyTuple_GET_ITEM(c->expected, i);
        if (PyDict_GetItemWithError(globals, name) != NULL)
            return 0;
        if (PyErr_Occurred() || PyDict_GetItemWithError(builtins, name) != PyTuple_GET_ITEM(c->expected2, i))
            return PyErr_Occurred() ? -1 : 0;
    }
    c->dicts[0] = globals;
    c->dicts[1] = builtins;
    c->versions[0] = versions[0];
    c->versions[1] = versions[1];
    return 1;
}

/* 1 pass, 0 fail, -1 error; `other` is the second value of CHK_ALIAS and CHK_DISTINCT. `*dead` is set when a
 * weakly held object has died (the entry can never pass again). */
static int run_check(GuardCheck *c, PyObject *value, PyObject *other, int *dead)
{
    if (c->kind == CHK_CALL) {
        PyObject *r = PyObject_CallNoArgs(c->expected);
        int ok = r != NULL && r == c->expected2;
        Py_XDECREF(r);
        return r == NULL ? -1 : ok;
    }
    if (value == NULL)
        return 0;
    int found;
    switch (c->kind) {
    case CHK_TYPE:
        return (PyObject *)Py_TYPE(value) == check_target(c, dead);
    case CHK_ID:
        return value == check_target(c, dead);
    case CHK_EQUALS:
        return strict_equal(value, c->expected);
    case CHK_LEN:
        return (PyObject *)Py_TYPE(value) == c->expected && PyObject_Length(value) == c->length;
    case CHK_DICT_KEYS:
        return dict_keys_equal(value, c->expected);
    case CHK_ALIAS:
        return other != NULL && value == other;
    case CHK_DISTINCT:
        return other != NULL && value != other;
    case CHK_BUILTINS:
        return builtins_unchanged(c, value, other);
    case CHK_FUNCTION: /* a function of this code over these globals (`other`), whichever object it is */
        return PyFunction_Check(value) && other != NULL && ((PyFunctionObject *)value)->func_globals == other &&
               ((PyFunctionObject *)value)->func_code == check_target(c, dead);
    case CHK_HASATTR:
        found = has_attr(value, c->expected);
        return found < 0 ? -1 : found == (c->expected2 == Py_True);
    case CHK_CONTAINS:
        found = PySequence_Contains(value, c->expected);
        return found < 0 ? -1 : found == (c->expected2 == Py_True);
    }
    return 0;
}

PyObject *guards_strict_equal(PyObject *self, PyObject *args)
{
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "OO:strict_equal", &a, &b))
        return NULL;
    int eq = strict_equal(a, b);
    return eq < 0 ? NULL : PyBool_FromLong(eq);
}

/* ---- GuardSet ---- */

typedef struct {
    int kind;
    int parent;
    PyObject *key;
    Py_ssize_t slot;
} Accessor;

typedef struct {
    GuardCheck *check;
    int acc, acc2;
} Item;

typedef struct {
    PyObject_HEAD
    Accessor *accessors;
    int n_accessors;
    Item *items;
    int n_items;
    PyObject *tensor_check; /* callable(*tensors) -> bool, or NULL */
    int *tensor_acc;
    int n_tensors;
    PyObject *fallback;     /* callable(L, G) -> bool, or NULL */
    int valid;
    PyObject *dict;
    PyObject *weakreflist;
} GuardSet;

static PyTypeObject GuardSetType;

typedef struct {
    struct _PyInterpreterFrame *frame; /* or NULL: read `locals` */
    PyObject *locals;
    PyObject *globals;
    PyObject **values; /* owned references, one per accessor once fetched */
    char *fetched;
} Env;

static PyObject *fetch(GuardSet *gs, Env *env, int i)
{
    if (i < 0)
        return NULL;
    if (env->fetched[i])
        return env->values[i];
    Accessor *a = &gs->accessors[i];
    PyObject *v = NULL, *parent;
    switch (a->kind) {
    case ACC_LOCAL:
        v = env->frame != NULL ? frame_local(env->frame, a->slot) : PyDict_GetItemWithError(env->locals, a->key);
        Py_XINCREF(v);
        break;
    case ACC_GLOBAL:
        v = env->globals != NULL ? Py_XNewRef(PyDict_GetItemWithError(env->globals, a->key)) : NULL;
        break;
    case ACC_CONST:
        v = Py_NewRef(a->key);
        break;
    case ACC_GLOBALS:
        v = Py_XNewRef(env->globals);
        break;
    case ACC_ATTR:
        parent = fetch(gs, env, a->parent);
        v = parent != NULL ? PyObject_GetAttr(parent, a->key) : NULL;
        break;
    case ACC_ITEM:
        parent = fetch(gs, env, a->parent);
        v = parent != NULL ? PyObject_GetItem(parent, a->key) : NULL;
        break;
    case ACC_DICT: /* the instance dict generic attribute lookup reads, without a lookup of `__dict__` */
        parent = fetch(gs, env, a->parent);
        v = parent != NULL ? PyObject_GenericGetDict(parent, NULL) : NULL;
        break;
    }
    if (v == NULL)
        PyErr_Clear();
    env->values[i] = v;
    env->fetched[i] = 1;
    return v;
}

static int compare_pointers(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(PyObject *const *)a, y = (uintptr_t)*(PyObject *const *)b;
    return (x > y) - (x < y);
}

/* 1 when no two of `values` are the same object; a model's hundreds of parameters are sorted (a
 * copy), a few tensors compared pairwise. -1 on memory error. */
static int distinct(PyObject **values, int n)
{
    if (n <= 16) {
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (values[i] == values[j])
                    return 0;
        return 1;
    }
    PyObject **sorted = PyMem_Malloc(sizeof(PyObject *) * n);
    if (sorted == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(sorted, values, sizeof(PyObject *) * n);
    qsort(sorted, n, sizeof(PyObject *), compare_pointers);
    int ok = 1;
    for (int i = 1; i < n && ok; i++)
        ok = sorted[i] != sorted[i - 1];
    PyMem_Free(sorted);
    return ok;
}

static int check_tensors(GuardSet *gs, Env *env)
{
    PyObject *stack[STACK_VALUES];
    PyObject **tensors = gs->n_tensors <= STACK_VALUES ? stack : PyMem_Malloc(sizeof(PyObject *) * gs->n_tensors);
    if (tensors == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int ok = 1;
    for (int i = 0; i < gs->n_tensors && ok; i++) {
        tensors[i] = fetch(gs, env, gs->tensor_acc[i]);
        ok = tensors[i] != NULL;
    }
    if (ok)
        ok = distinct(tensors, gs->n_tensors);
    if (ok > 0) {
        PyObject *r = PyObject_Vectorcall(gs->tensor_check, tensors, gs->n_tensors, NULL);
        ok = r == NULL ? -1 : PyObject_IsTrue(r);
        Py_XDECREF(r);
    }
    if (tensors != stack)
        PyMem_Free(tensors);
    return ok;
}

static int check_fallback(GuardSet *gs, Env *env)
{
    PyObject *locals = env->frame != NULL ? frame_locals(env->frame) : Py_NewRef(env->locals);
    if (locals == NULL)
        return -1;
    PyObject *args[2] = {locals, env->globals != NULL ? env->globals : Py_None};
    PyObject *r = PyObject_Vectorcall(gs->fallback, args, 2, NULL);
    Py_DECREF(locals);
    int ok = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    return ok;
}

static int eval_items(GuardSet *gs, Env *env, unsigned long long epoch)
{
    for (int i = 0; i < gs->n_items; i++) {
        Item *it = &gs->items[i];
        if (epoch != 0 && it->check->passed_epoch == epoch)
            continue;
        int dead = 0;
        int ok = run_check(it->check, fetch(gs, env, it->acc), fetch(gs, env, it->acc2), &dead);
        if (dead)
            gs->valid = 0;
        if (ok <= 0)
            return ok;
        it->check->passed_epoch = epoch;
    }
    return 1;
}

/* Guards never raise: a value that cannot be read or compared fails the check. */
static int eval_env(GuardSet *gs, Env *env, unsigned long long epoch)
{
    if (!gs->valid)
        return 0;
    PyObject *value_stack[STACK_VALUES];
    char fetched_stack[STACK_VALUES] = {0};
    int n = gs->n_accessors;
    env->values = n <= STACK_VALUES ? value_stack : PyMem_Calloc(n, sizeof(PyObject *));
    env->fetched = n <= STACK_VALUES ? fetched_stack : PyMem_Calloc(n, 1);
    if (env->values == NULL || env->fetched == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int ok = eval_items(gs, env, epoch);
    if (ok > 0 && gs->n_tensors > 0)
        ok = check_tensors(gs, env);
    if (ok > 0 && gs->fallback != NULL)
        ok = check_fallback(gs, env);
    if (ok < 0) {
        PyErr_Clear();
        ok = 0;
    }
    for (int i = 0; i < n; i++)
        if (env->fetched[i])
            Py_XDECREF(env->values[i]);
    if (n > STACK_VALUES) {
        PyMem_Free(env->values);
        PyMem_Free(env->fetched);
    }
    return ok;
}

int guardset_check(PyObject *obj)
{
    return Py_TYPE(obj) == &GuardSetType;
}

int guardset_valid(PyObject *obj)
{
    return ((GuardSet *)obj)->valid;
}

int guardset_eval_frame(PyObject *obj, struct _PyInterpreterFrame *f, unsigned long long epoch)
{
    Env env = {f, NULL, frame_globals(f), NULL, NULL};
    return eval_env((GuardSet *)obj, &env, epoch);
}

/* The set does not own the globals it was built for: entries live in co_extra, which the
 * collector cannot see, and a function's globals often hold the function (and so its code). */
static PyObject *guardset_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    PyObject *locals, *globals = NULL;
    if (!PyArg_ParseTuple(args, "O!|O!:GuardSet", &PyDict_Type, &locals, &PyDict_Type, &globals))
        return NULL;
    GuardSet *gs = (GuardSet *)self;
    Env env = {NULL, locals, globals, NULL, NULL};
    int ok = eval_env(gs, &env, guards_next_epoch());
    return ok < 0 ? NULL : PyBool_FromLong(ok);
}

static int parse_accessors(GuardSet *gs, PyObject *seq)
{
    gs->n_accessors = (int)PySequence_Fast_GET_SIZE(seq);
    gs->accessors = PyMem_Calloc(gs->n_accessors + 1, sizeof(Accessor));
    if (gs->accessors == NULL)
        return -1;
    for (int i = 0; i < gs->n_accessors; i++) {
        Accessor *a = &gs->accessors[i];
        PyObject *key;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "iiOn:accessor", &a->kind, &a->parent, &key, &a->slot))
            return -1;
        if (a->parent >= i || ((a->kind == ACC_ATTR || a->kind == ACC_ITEM || a->kind == ACC_DICT) && a->parent < 0)) {
            PyErr_Format(PyExc_ValueError, "accessor %d must follow its parent", i);
            return -1;
        }
        a->key = Py_NewRef(key);
    }
    return 0;
}

static int check_index(GuardSet *gs, int i)
{
    if (i < -1 || i >= gs->n_accessors) {
        PyErr_Format(PyExc_ValueError, "accessor index %d out of range", i);
        return -1;
    }
    return 0;
}

static int parse_items(GuardSet *gs, PyObject *seq)
{
    gs->n_items = (int)PySequence_Fast_GET_SIZE(seq);
    gs->items = PyMem_Calloc(gs->n_items + 1, sizeof(Item));
    if (gs->items == NULL)
        return -1;
    for (int i = 0; i < gs->n_items; i++) {
        Item *it = &gs->items[i];
        PyObject *check;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "O!ii:item", &GuardCheckType, &check, &it->acc, &it->acc2))
            return -1;
        if (check_index(gs, it->acc) < 0 || check_index(gs, it->acc2) < 0)
            return -1;
        it->check = (GuardCheck *)Py_NewRef(check);
    }
    return 0;
}

static int parse_tensors(GuardSet *gs, PyObject *seq)
{
    gs->n_tensors = (int)PySequence_Fast_GET_SIZE(seq);
    gs->tensor_acc = PyMem_Calloc(gs->n_tensors + 1, sizeof(int));
    if (gs->tensor_acc == NULL)
        return -1;
    for (int i = 0; i < gs->n_tensors; i++) {
        gs->tensor_acc[i] = PyLong_AsInt(PySequence_Fast_GET_ITEM(seq, i));
        if ((gs->tensor_acc[i] == -1 && PyErr_Occurred()) || check_index(gs, gs->tensor_acc[i]) < 0)
            return -1;
        if (gs->tensor_acc[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "a tensor needs an accessor");
            return -1;
        }
    }
    return 0;
}

static void guardset_free_tables(GuardSet *gs)
{
    for (int i = 0; gs->accessors != NULL && i < gs->n_accessors; i++)
        Py_XDECREF(gs->accessors[i].key);
    for (int i = 0; gs->items != NULL && i < gs->n_items; i++)
        Py_XDECREF(gs->items[i].check);
    PyMem_Free(gs->accessors);
    PyMem_Free(gs->items);
    PyMem_Free(gs->tensor_acc);
    gs->accessors = NULL;
    gs->items = NULL;
    gs->tensor_acc = NULL;
    gs->n_accessors = gs->n_items = gs->n_tensors = 0;
}

static PyObject *guardset_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"accessors", "items", "tensor_check", "tensor_accessors", "fallback", NULL};
    PyObject *accessors, *items, *tensor_check = Py_None, *tensor_accessors = NULL, *fallback = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|OOO:GuardSet", names, &accessors, &items, &tensor_check,
                                     &tensor_accessors, &fallback))
        return NULL;
    GuardSet *gs = (GuardSet *)type->tp_alloc(type, 0);
    if (gs == NULL)
        return NULL;
    gs->valid = 1;
    gs->tensor_check = tensor_check == Py_None ? NULL : Py_NewRef(tensor_check);
    gs->fallback = fallback == Py_None ? NULL : Py_NewRef(fallback);
    PyObject *acc_seq = PySequence_Fast(accessors, "accessors must be a sequence");
    PyObject *item_seq = acc_seq ? PySequence_Fast(items, "items must be a sequence") : NULL;
    PyObject *tensor_seq = NULL;
    if (item_seq != NULL)
        tensor_seq = tensor_accessors != NULL ? PySequence_Fast(tensor_accessors, "tensor_accessors must be a sequence")
                                              : PyTuple_New(0);
    int rc = (tensor_seq == NULL || parse_accessors(gs, acc_seq) < 0 || parse_items(gs, item_seq) < 0 ||
              parse_tensors(gs, tensor_seq) < 0) ? -1 : 0;
    Py_XDECREF(acc_seq);
    Py_XDECREF(item_seq);
    Py_XDECREF(tensor_seq);
    if (rc == 0 && gs->n_tensors > 0 && gs->tensor_check == NULL) {
        PyErr_SetString(PyExc_ValueError, "tensor accessors need a tensor_check");
        rc = -1;
    }
    if (rc < 0) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        Py_DECREF(gs);
        return NULL;
    }
    return (PyObject *)gs;
}

static int guardset_traverse(GuardSet *gs, visitproc visit, void *arg)
{
    for (int i = 0; gs->accessors != NULL && i < gs->n_accessors; i++)
        Py_VISIT(gs->accessors[i].key);
    for (int i = 0; gs->items != NULL && i < gs->n_items; i++)
        Py_VISIT(gs->items[i].check);
    Py_VISIT(gs->tensor_check);
    Py_VISIT(gs->fallback);
    Py_VISIT(gs->dict);
    return 0;
}

static int guardset_clear(GuardSet *gs)
{
    guardset_free_tables(gs);
    Py_CLEAR(gs->tensor_check);
    Py_CLEAR(gs->fallback);
    Py_CLEAR(gs->dict);
    return 0;
}

static void guardset_dealloc(GuardSet *gs)
{
    PyObject_GC_UnTrack(gs);
    if (gs->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)gs);
    guardset_clear(gs);
    Py_TYPE(gs)->tp_free((PyObject *)gs);
}

static PyMemberDef guardset_members[] = {
    {"valid", T_INT, offsetof(GuardSet, valid), 0, "false once an object it identifies has died"},
    {"__dictoffset__", T_PYSSIZET, offsetof(GuardSet, dict), READONLY},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(GuardSet, weakreflist), READONLY},
    {NULL},
};

static PyGetSetDef guardset_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict},
    {NULL},
};

static PyTypeObject GuardSetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minidynamo._C.GuardSet",
    .tp_basicsize = sizeof(GuardSet),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "GuardSet(accessors, items, tensor_check=None, tensor_accessors=(), fallback=None):\n"
              "the guards of one cache entry; call it with a locals (and globals) dict, or let the hook check a frame.",
    .tp_new = guardset_new,
    .tp_call = guardset_call,
    .tp_dealloc = (destructor)guardset_dealloc,
    .tp_traverse = (traverseproc)guardset_traverse,
    .tp_clear = (inquiry)guardset_clear,
    .tp_members = guardset_members,
    .tp_getset = guardset_getset,
    .tp_dictoffset = offsetof(GuardSet, dict),
    .tp_weaklistoffset = offsetof(GuardSet, weakreflist),
};

static int add_type(PyObject *module, PyTypeObject *type, const char *name)
{
    if (PyType_Ready(type) < 0)
        return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

int guards_init_types(PyObject *module)
{
    if (add_type(module, &GuardCheckType, "GuardCheck") < 0 || add_type(module, &GuardSetType, "GuardSet") < 0)
        return -1;
    static const struct { const char *name; int value; } constants[] = {
        {"ACC_LOCAL", ACC_LOCAL}, {"ACC_GLOBAL", ACC_GLOBAL}, {"ACC_ATTR", ACC_ATTR}, {"ACC_ITEM", ACC_ITEM},
        {"ACC_CONST", ACC_CONST}, {"ACC_DICT", ACC_DICT}, {"ACC_GLOBALS", ACC_GLOBALS}, {"CHK_TYPE", CHK_TYPE}, {"CHK_ID", CHK_ID}, {"CHK_EQUALS", CHK_EQUALS},
        {"CHK_LEN", CHK_LEN}, {"CHK_DICT_KEYS", CHK_DICT_KEYS}, {"CHK_ALIAS", CHK_ALIAS}, {"CHK_CALL", CHK_CALL},
        {"CHK_HASATTR", CHK_HASATTR}, {"CHK_CONTAINS", CHK_CONTAINS}, {"CHK_DISTINCT", CHK_DISTINCT},
        {"CHK_BUILTINS", CHK_BUILTINS}, {"CHK_FUNCTION", CHK_FUNCTION},
    };
    for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++)
        if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0)
            return -1;
    return 0;
}
