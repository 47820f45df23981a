# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Context merge, the Cython twin of merge_py.py.

Contexts are JSON objects held as ``dict``. A step's change is its *shallow diff* against the
context it started from: the keys it set (new or changed value) and the keys it removed.

Exact ``dict``/``list``/``tuple`` arguments take typed loops over the C API; anything else (a
dict subclass, a mapping, a generator) takes a generic path with the pure twin's Python
semantics, so both twins accept, return and raise the same for every input.
"""

from cpython.dict cimport PyDict_Copy, PyDict_GetItemWithError, PyDict_Next, PyDict_Update
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport Py_NE, Py_TYPE, PyObject, PyObject_RichCompareBool
from cpython.tuple cimport PyTuple_GET_ITEM

__all__ = ["diff", "apply_diff", "fold_join", "JoinConflict"]

cdef object _MISSING = object()


class JoinConflict(Exception):
    """Two branches of a fork changed the same key; ``key``, ``first``, ``second`` say which."""

    def __init__(self, key, first, second):
        super().__init__(key, first, second)
        self.key = key
        self.first = first
        self.second = second


cdef inline bint _changed(PyObject* old, PyObject* value) except -1:
    # The pure twin's ``old is not value and (type(old) is not type(value) or old != value)``.
    if old == value:
        return False
    if Py_TYPE(<object>old) is not Py_TYPE(<object>value):
        return True
    return PyObject_RichCompareBool(<object>old, <object>value, Py_NE)


cdef tuple _diff_dicts(dict before, dict after):
    cdef dict changed = {}
    cdef list removed = []
    cdef PyObject* found
    cdef Py_ssize_t shared = 0
    for key, value in after.items():
        found = PyDict_GetItemWithError(before, key)
        if found is NULL:
            changed[key] = value
            continue
        shared += 1
        old = <object>found  # a strong reference: __eq__ may mutate ``before``
        if _changed(<PyObject*>old, <PyObject*>value):
            changed[key] = value
    # Every key of ``before`` was met in ``after``: nothing was removed (the common case).
    if shared != len(before):
        for key in before:
            if key not in after:
                removed.append(key)
    return changed, removed


cdef tuple _diff_generic(before, after):
    changed = {}
    for key, value in after.items():
        old = before.get(key, _MISSING)
        if old is _MISSING or (old is not value and (type(old) is not type(value) or old != value)):
            changed[key] = value
    removed = [key for key in before if key not in after]
    return changed, removed


def diff(before, after):
    """The shallow diff turning ``before`` into ``after``: (keys set to new values, keys removed)."""
    if type(before) is dict and type(after) is dict:
        return _diff_dicts(<dict>before, <dict>after)
    return _diff_generic(before, after)


cdef inline object _copy(context):
    # ``dict(context)``: PyDict_Copy is the same thing for an exact dict.
    if type(context) is dict:
        return PyDict_Copy(context)
    return dict(context)


cdef inline int _drop(dict result, removed) except -1:
    cdef Py_ssize_t i
    if type(removed) is list:
        # Indexes re-checked each turn: a key's __eq__ may shrink the list under us.
        i = 0
        while i < PyList_GET_SIZE(removed):
            key = <object>PyList_GET_ITEM(removed, i)
            result.pop(key, None)
            i += 1
    else:
        for key in removed:
            result.pop(key, None)
    return 0


cdef inline int _set(dict result, changed) except -1:
    if type(changed) is dict:
        PyDict_Update(result, changed)
    else:
        # dict.update also takes other mappings and iterables of pairs.
        dict.update(result, changed)
    return 0


def apply_diff(context, changed, removed):
    """A new context: ``context`` with ``removed`` dropped and ``changed`` applied."""
    cdef dict result = _copy(context)
    _drop(result, removed)
    _set(result, changed)
    return result


cdef int _fold_branch(dict result, dict owner, base, branch, Py_ssize_t index) except -1:
    cdef tuple pair
    cdef PyObject* first
    if type(base) is dict and type(branch) is dict:
        pair = _diff_dicts(<dict>base, <dict>branch)
    else:
        pair = _diff_generic(base, branch)
    changed = <object>PyTuple_GET_ITEM(pair, 0)
    removed = <object>PyTuple_GET_ITEM(pair, 1)
    for key in changed:
        first = PyDict_GetItemWithError(owner, key)
        if first is not NULL:
            raise JoinConflict(key, <object>first, index)
        owner[key] = index
    for key in removed:
        first = PyDict_GetItemWithError(owner, key)
        if first is not NULL:
            raise JoinConflict(key, <object>first, index)
        owner[key] = index
    _drop(result, removed)
    _set(result, changed)
    return 0


def fold_join(base, branches):
    """Fold the branch contexts of a fork onto the fork-time context ``base``, in branch order.

    Each branch contributes its shallow diff against ``base``. Raises JoinConflict when two
    branches changed (set or removed) the same key.
    """
    cdef dict result = _copy(base)
    cdef dict owner = {}
    cdef Py_ssize_t index = 0
    if type(branches) is list:
        while index < PyList_GET_SIZE(branches):
            _fold_branch(result, owner, base, <object>PyList_GET_ITEM(branches, index), index)
            index += 1
    else:
        for branch in branches:
            _fold_branch(result, owner, base, branch, index)
            index += 1
    return result
