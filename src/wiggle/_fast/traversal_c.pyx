# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Graph traversal, the Cython twin of traversal_py.py.

The one place that decides, for a worker step, what runs next and whether a worker may run it
locally. The server's drive loop and the worker's local driver both call it, so the two can
never disagree.

CompiledGraph keeps kinds, edges and checkpoint marks in C arrays; ``ids``, ``index`` and
``queues`` stay Python objects because callers hand in and get back node ids and queue names.
"""

from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc

from .._model import Handback, NodeKind

__all__ = ["CompiledGraph"]

# Kind codes of CompiledGraph.kinds (kept in a C int array here).
TASK, PREDICATE, SLEEP, FORK, JOIN, USER_TASK, END = range(7)
SIGNAL, SUB_WORKFLOW, FOR_EACH = 7, 8, 9

cdef enum:
    C_TASK = 0
    C_PREDICATE = 1
    C_SLEEP = 2
    C_FORK = 3
    C_JOIN = 4
    C_USER_TASK = 5
    C_END = 6
    C_SIGNAL = 7
    C_SUB_WORKFLOW = 8
    C_FOR_EACH = 9
    C_LAST = 9

_KIND_CODE = {
    NodeKind.TASK: TASK,
    NodeKind.PREDICATE: PREDICATE,
    NodeKind.SLEEP: SLEEP,
    NodeKind.FORK: FORK,
    NodeKind.JOIN: JOIN,
    NodeKind.USER_TASK: USER_TASK,
    NodeKind.END: END,
    NodeKind.SIGNAL: SIGNAL,
    NodeKind.SUB_WORKFLOW: SUB_WORKFLOW,
    NodeKind.FOR_EACH: FOR_EACH,
}
cdef object _OTHER_QUEUE = Handback.OTHER_QUEUE
# Handback by kind code; None for the worker steps (never read for them).
cdef tuple _BOUNDARY_BY_CODE = (
    None, None, Handback.SLEEP, Handback.FORK, Handback.JOIN, Handback.USER_TASK, Handback.TERMINAL,
    Handback.SIGNAL, Handback.SUB_WORKFLOW, Handback.FOR_EACH,
)


cdef int* _int_array(list values) except NULL:
    cdef Py_ssize_t n = len(values), i
    cdef int* out = <int*>PyMem_Malloc((n if n > 0 else 1) * sizeof(int))
    if out is NULL:
        raise MemoryError()
    for i in range(n):
        out[i] = values[i]
    return out


cdef class CompiledGraph:
    """A definition's graph as flat arrays indexed by node number, for fast repeated walks.

    ``kinds[i]`` is a kind code, ``nexts[i]``/``alts[i]`` successor indexes (-1: none),
    ``queues[i]`` the resolved queue of a worker step (the workflow name by default; "" for a
    step with a concurrency or rate limit, handed back), and
    ``checkpoints[i]`` whether a LOCAL_ASYNC run must flush after node ``i``.
    """

    # Private tuples and dict behind the C arrays: the public attributes hand out copies, so no
    # caller can shrink what the arrays index into.
    cdef tuple _ids
    cdef dict _index
    cdef tuple _queues
    cdef Py_ssize_t _n
    cdef int* _kinds
    cdef int* _nexts
    cdef int* _alts
    cdef bint* _checkpoints

    def __cinit__(self):
        self._n = 0
        self._kinds = NULL
        self._nexts = NULL
        self._alts = NULL
        self._checkpoints = NULL

    def __init__(self, definition):
        # Built as Python lists first, in the pure twin's order, so a broken definition raises
        # exactly what the pure twin raises; then copied into the C arrays.
        ids = [n.id for n in definition.nodes]
        index = {node_id: i for i, node_id in enumerate(ids)}
        kinds = [_KIND_CODE[n.kind] for n in definition.nodes]
        nexts = [index[n.next] if n.next is not None else -1 for n in definition.nodes]
        alts = [index[n.alt_next] if n.alt_next is not None else -1 for n in definition.nodes]
        # a step with a concurrency or rate limit is handed back (the pure twin says why)
        queues = [
            "" if n.limit is not None or n.rate is not None else (n.queue or definition.name)
            for n in definition.nodes
        ]
        marks = set(definition.checkpoints)
        checkpoints = [n.id in marks for n in definition.nodes]

        cdef Py_ssize_t count = len(ids), i
        cdef int* c_kinds = NULL
        cdef int* c_nexts = NULL
        cdef int* c_alts = NULL
        cdef bint* c_checkpoints = NULL
        try:
            c_kinds = _int_array(kinds)
            c_nexts = _int_array(nexts)
            c_alts = _int_array(alts)
            c_checkpoints = <bint*>PyMem_Malloc((count if count > 0 else 1) * sizeof(bint))
            if c_checkpoints is NULL:
                raise MemoryError()
            for i in range(count):
                c_checkpoints[i] = checkpoints[i]
        except BaseException:
            PyMem_Free(c_kinds)
            PyMem_Free(c_nexts)
            PyMem_Free(c_alts)
            PyMem_Free(c_checkpoints)
            raise
        self._release()
        self._ids = tuple(ids)
        self._index = index
        self._queues = tuple(queues)
        self._n = count
        self._kinds = c_kinds
        self._nexts = c_nexts
        self._alts = c_alts
        self._checkpoints = c_checkpoints

    def __dealloc__(self):
        self._release()

    def __reduce__(self):
        # pickle and copy, as the pure twin's slots allow: rebuilt from the public arrays.
        self._ready("ids")
        return _restore, (self.ids, self.index, self.kinds, self.nexts, self.alts, self.queues, self.checkpoints)

    cdef void _release(self) noexcept:
        PyMem_Free(self._kinds)
        PyMem_Free(self._nexts)
        PyMem_Free(self._alts)
        PyMem_Free(self._checkpoints)
        self._kinds = self._nexts = self._alts = NULL
        self._checkpoints = NULL
        self._n = 0

    cdef inline int _ready(self, str name) except -1:
        if self._index is None:
            # Never initialised (``CompiledGraph.__new__``): what the pure twin's empty slot says.
            raise AttributeError(f"'CompiledGraph' object has no attribute '{name}'")
        return 0

    @property
    def ids(self):
        self._ready("ids")
        return list(self._ids)

    @property
    def index(self):
        self._ready("index")
        return dict(self._index)

    @property
    def kinds(self):
        self._ready("kinds")
        return [self._kinds[i] for i in range(self._n)]

    @property
    def nexts(self):
        self._ready("nexts")
        return [self._nexts[i] for i in range(self._n)]

    @property
    def alts(self):
        self._ready("alts")
        return [self._alts[i] for i in range(self._n)]

    @property
    def queues(self):
        self._ready("queues")
        return list(self._queues)

    @property
    def checkpoints(self):
        self._ready("checkpoints")
        return [self._checkpoints[i] for i in range(self._n)]

    cdef inline Py_ssize_t _find(self, node_id) except -1:
        self._ready("index")
        return self._index[node_id]

    def successor(self, node_id, predicate_value=True):
        """The node after the worker step ``node_id``: a task's ``next``; a predicate's ``next`` or ``alt_next``."""
        cdef Py_ssize_t i = self._find(node_id)
        cdef int j
        if self._kinds[i] == C_PREDICATE and not predicate_value:
            j = self._alts[i]
        else:
            j = self._nexts[i]
        if j < 0:
            return None
        return <object>PyTuple_GET_ITEM(self._ids, j)

    def classify(self, node_id, queues):
        """Why a worker serving ``queues`` must hand back at ``node_id``; None to run it locally."""
        cdef Py_ssize_t i = self._find(node_id)
        cdef int kind = self._kinds[i]
        if kind == C_TASK or kind == C_PREDICATE:
            return None if <object>PyTuple_GET_ITEM(self._queues, i) in queues else _OTHER_QUEUE
        return <object>PyTuple_GET_ITEM(_BOUNDARY_BY_CODE, kind)

    def is_checkpoint(self, node_id):
        """True if a LOCAL_ASYNC run must flush right after ``node_id``."""
        return self._checkpoints[self._find(node_id)]


def _restore(ids, index, kinds, nexts, alts, queues, checkpoints):
    cdef CompiledGraph graph = CompiledGraph.__new__(CompiledGraph)
    cdef Py_ssize_t count = len(ids), i
    if not (len(kinds) == len(nexts) == len(alts) == len(queues) == len(checkpoints) == count):
        raise ValueError("CompiledGraph state arrays differ in length")
    for i in range(count):
        # indexes are read unchecked by the walks: refuse any that point outside the arrays
        if not (-1 <= nexts[i] < count and -1 <= alts[i] < count and 0 <= kinds[i] <= C_LAST):
            raise ValueError(f"CompiledGraph state is corrupt at node {i}")
    for position in index.values():
        if not 0 <= position < count:
            raise ValueError(f"CompiledGraph state has an index entry out of range: {position!r}")
    graph._kinds = _int_array(list(kinds))
    graph._nexts = _int_array(list(nexts))
    graph._alts = _int_array(list(alts))
    graph._checkpoints = <bint*>PyMem_Malloc((count if count > 0 else 1) * sizeof(bint))
    if graph._checkpoints is NULL:
        raise MemoryError()
    for i in range(count):
        graph._checkpoints[i] = checkpoints[i]
    graph._ids = tuple(ids)
    graph._index = dict(index)
    graph._queues = tuple(queues)
    graph._n = count
    return graph
