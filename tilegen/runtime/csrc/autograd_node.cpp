/* An op's autograd node in C++: what an eager training call records, without a Python
   torch.autograd.Function.

   A `Formula` per op holds what its autograd formula (tilegen.runtime.autograd.Gradients) says
   once: how many leading arguments are tensors, which inputs and outputs the backward reads, how
   many outputs are results, and the Python function that computes the gradients. Its
   `attach(args, outputs)` makes the outputs of a forward the caller has already run the results
   of one node: the inputs' gradient edges collected, the tensors the backward reads kept (as
   detached aliases with their version, so that an output kept does not hold its own node, and a
   tensor changed in place since raises as autograd's saved tensors do), the scalars held.

   The node's apply takes the GIL and calls the Python function with (saved tensors, incoming
   gradients with zeros for those no loss reads, which inputs need a gradient, scalars); it
   returns one gradient (or None) per tensor input. Where every gradient needed is an incoming
   one (an input the op adds to an output), the node passes them on without Python. A backward
   asked for gradients to differentiate again (create_graph=True) gets the saved tensors with their
   history (an input as it was passed; an output as this node's result), and the Python function
   computes gradients autograd can differentiate (Gradients.differentiable), or raises. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ATen/ExpandUtils.h>
#include <ATen/SavedTensorHooks.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

/* A tensor input's source of gradient (Formula): an incoming gradient's index (0 up), none, or
   the backward op's result r, as FIRST_RESULT - r. */
constexpr Py_ssize_t NO_GRADIENT = -1;
constexpr Py_ssize_t FIRST_RESULT = -2;

PyObject *call_name = nullptr;  /* "call", interned */

/* A size as PyTorch prints one ("[5, 7]"), for errors, without iostreams: c10::str's stream,
   inserting a number on autograd's device thread, crashed the process on a GPU (torch 2.11). */
std::string size_text(at::IntArrayRef sizes) {
    std::string text = "[";
    for (size_t i = 0; i < sizes.size(); ++i)
        text += (i ? ", " : "") + std::to_string(sizes[i]);
    return text + "]";
}

/* A tensor the backward reads: a detached alias (same storage and version counter) and the
   version it had when kept; for create_graph=True, an input as it was passed (`original`, with its
   history), the input whose history a stand-in kept for an input's shape takes (`input`: its
   values were not kept, its gradient edge is this node's), or the slot of an output this node is
   the history of (`slot`; an output holds no reference to its own node, which would never be
   freed). */
struct Kept {
    at::Tensor alias;
    int64_t version = 0;
    at::Tensor original;
    Py_ssize_t input = -1;
    Py_ssize_t slot = -1;
};

Kept keep(const at::Tensor &t) {
    Kept k;
    k.alias = t.detach();
    k.version = t._version();
    return k;
}

/* What is kept for a saved input whose values no gradient asked for reads (Gradients.read_by):
   its shape, dtype and device over one element, every stride 0 (autograd.shape_only). */
at::Tensor shape_only(const at::Tensor &t) {
    return at::empty({}, t.options()).expand(t.sizes());
}

/* The GIL taken for a scope and given back on every way out of it, a C++ exception's included: an
   error thrown while it is held (passed_to_input's, an ATen error in a sum) would otherwise leave
   it taken, and the thread that called backward would wait for it forever. */
struct GilHeld {
    PyGILState_STATE state;
    GilHeld() : state(PyGILState_Ensure()) {}
    GilHeld(const GilHeld &) = delete;
    GilHeld &operator=(const GilHeld &) = delete;
    ~GilHeld() { PyGILState_Release(state); }
};

/* Drops a reference to `object` (the GIL held) with no Python error set while it goes: a pending
   error is held aside and set again after. Objects freed with an error set may run code that
   expects none: the suspected cause of a crash on autograd's device thread on a GPU, where the
   formula's misshapen tensors were freed with the node's error pending (tests/test_autograd.py). */
void release_keeping_error(PyObject *object) {
    if (object == nullptr)
        return;
    if (PyErr_Occurred() == nullptr) {
        Py_DECREF(object);
        return;
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *pending = PyErr_GetRaisedException();
    Py_DECREF(object);
    PyErr_SetRaisedException(pending);
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    Py_DECREF(object);
    PyErr_Restore(type, value, traceback);
#endif
}

/* The Python object a node shares with its formula: its refcount is touched under the GIL only. */
struct PyRef {
    PyObject *object;
    explicit PyRef(PyObject *o) : object(o) { Py_XINCREF(o); }
    PyRef(const PyRef &) = delete;
    PyRef &operator=(const PyRef &) = delete;
    ~PyRef() {
        if (object != nullptr && Py_IsInitialized()) {
            GilHeld gil;
            Py_DECREF(object);
        }
    }
};

struct TilegenNode : Node {
    std::string op;
    std::shared_ptr<PyRef> gradients;  /* the formula's Python function */
    PyRef scalars;                     /* the call's arguments after its tensors (a tuple) */
    std::vector<Kept> kept;            /* the saved inputs, then the saved outputs */
    std::vector<std::vector<int64_t>> shapes;  /* each tensor input's */
    std::vector<at::ScalarType> dtypes;        /* each tensor input's: the precision its gradient is summed in */
    std::shared_ptr<const std::vector<Py_ssize_t>> sources;  /* the formula's */
    std::shared_ptr<const std::vector<Py_ssize_t>> layout;   /* the formula's saved outputs, -1 for a recomputed one */
    size_t saved_inputs = 0;
    std::shared_ptr<PyRef> backward;  /* the backward op's call path, where it serves the backward whole */
    bool selective = false;  /* the backward op takes last which tensor inputs need a gradient (Gradients.selective) */
    /* The results autograd does not differentiate, by slot: their shapes and options. */
    std::map<size_t, std::pair<std::vector<int64_t>, at::TensorOptions>> plain_results;
    bool released = false;

    TilegenNode(std::string op_, std::shared_ptr<PyRef> gradients_, PyObject *scalars_, torch::autograd::edge_list &&edges)
        : Node(std::move(edges)), op(std::move(op_)), gradients(std::move(gradients_)), scalars(scalars_) {}

    std::string name() const override { return op + "Backward"; }

    /* The backward op's call served by its compiled call path (the GIL held): its arguments as
       the Python function would pass them (saved inputs, saved outputs with None for a recomputed
       one, incoming gradients, scalars). 1 with `results` filled, 0 where it does not serve the
       call (the Python function then runs), -1 with the error set. */
    int serve_backward(const variable_list &saved, const variable_list &grads, variable_list &results) {
        std::vector<PyObject *> argv;
        argv.reserve(saved.size() + layout->size() + grads.size() + static_cast<size_t>(PyTuple_GET_SIZE(scalars.object)));
        bool wrapped = true;
        size_t next = 0;
        for (; next < saved_inputs; next++)
            argv.push_back(THPVariable_Wrap(saved[next]));
        for (Py_ssize_t slot : *layout)
            argv.push_back(slot < 0 ? Py_NewRef(Py_None) : THPVariable_Wrap(saved[next++]));
        for (const at::Tensor &g : grads)
            argv.push_back(THPVariable_Wrap(g));
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(scalars.object); i++)
            argv.push_back(Py_NewRef(PyTuple_GET_ITEM(scalars.object, i)));
        if (selective) {
            /* Which inputs need a gradient, as a list (the backward op's last argument): the kernel
               stores only those gradients (and sums only their columns). */
            PyObject *needed = PyList_New(static_cast<Py_ssize_t>(num_outputs()));
            for (size_t i = 0; needed != nullptr && i < num_outputs(); i++)
                PyList_SET_ITEM(needed, static_cast<Py_ssize_t>(i), Py_NewRef(task_should_compute_output(i) ? Py_True : Py_False));
            argv.push_back(needed);
        }
        for (PyObject *a : argv)
            wrapped = wrapped && a != nullptr;
        PyObject *call = wrapped ? PyObject_GetAttr(backward->object, call_name) : nullptr;
        PyObject *served = call != nullptr ? PyObject_Vectorcall(call, argv.data(), argv.size(), nullptr) : nullptr;
        release_keeping_error(call);
        for (PyObject *a : argv)
            release_keeping_error(a);
        if (served == nullptr)
            return -1;
        if (served == Py_None) {
            Py_DECREF(served);
            return 0;
        }
        int outcome = 1;
        for (size_t i = 0; i < results.size() && outcome > 0; i++) {
            Py_ssize_t source = (*sources)[i];
            if (!task_should_compute_output(i) || source == NO_GRADIENT)
                continue;
            if (source >= 0) {
                results[i] = passed_to_input(grads[static_cast<size_t>(source)], i);
                continue;
            }
            Py_ssize_t r = FIRST_RESULT - source;
            PyObject *item = PyTuple_Check(served) ? (r < PyTuple_GET_SIZE(served) ? PyTuple_GET_ITEM(served, r) : nullptr)
                                                   : (r == 0 ? served : nullptr);
            if (item == nullptr || !THPVariable_Check(item)) {
                PyErr_Format(PyExc_RuntimeError, "%s: its backward's call path returned %R, without a tensor as result %zd",
                             op.c_str(), served, r);
                outcome = -1;
            } else {
                results[i] = sum_to_input(THPVariable_Unpack(item), i);
                if (!results[i].defined()) {
                    misfit(THPVariable_Unpack(item), i);
                    outcome = -1;
                }
            }
        }
        release_keeping_error(served);
        return outcome;
    }

    /* A broadcast input's gradient, summed over its broadcast axes (as Gradients.compute does
       for torch.autograd.Function's node); undefined where it does not sum to the input's shape,
       for the caller to raise (misfit, as a Python error: no C++ exception in the backward).
       at::sum_to takes that fit for granted: torch 2.11's passed a misfit on unchanged. */
    at::Tensor sum_to_input(const at::Tensor &grad, size_t i) const {
        if (grad.sizes().equals(shapes[i]))
            return grad;
        if (!at::is_expandable_to(shapes[i], grad.sizes()))
            return at::Tensor();
        /* In the input's dtype where that is the more precise (Gradients._summed_to says why). */
        at::ScalarType given = grad.scalar_type();
        if (given != dtypes[i] && at::promote_types(given, dtypes[i]) == dtypes[i])
            return at::sum_to(grad.to(dtypes[i]), shapes[i]);
        return at::sum_to(grad, shapes[i]);
    }

    /* An incoming gradient passed on as input `i`'s: an output's shape, which the inputs broadcast
       to, so it always sums to the input's. */
    at::Tensor passed_to_input(const at::Tensor &grad, size_t i) const {
        at::Tensor summed = sum_to_input(grad, i);
        if (!summed.defined())
            throw std::runtime_error(op + ": an incoming gradient of size " + size_text(grad.sizes()) +
                                     " does not sum to its input's size " + size_text(shapes[i]));
        return summed;
    }

    /* The Python error of input `i`'s gradient `grad` that did not sum to its shape (the GIL
       held), in the words of Python's sum_to_size and Gradients._summed_to. */
    void misfit(const at::Tensor &grad, size_t i) const {
        PyErr_Format(PyExc_RuntimeError, "%s: the gradient of its input %zu: size %s is not expandable to size %s",
                     op.c_str(), i, size_text(grad.sizes()).c_str(), size_text(shapes[i]).c_str());
    }

    /* Compiled autograd traces each node through this; the node has no trace. Calls record
       torch.autograd.Function's node instead where compiled autograd runs when the forward does
       (Formula.usable); this is for a backward it runs all the same. */
    void compiled_args(torch::dynamo::autograd::CompiledNodeArgs &) const override {
        throw std::runtime_error(op + ": compiled autograd cannot trace tilegen's autograd node, recorded by a call made "
                                 "while compiled autograd was not running; run the forward where it runs (in the frame "
                                 "torch.compile compiles), or set TILEGEN_AUTOGRAD_NODE=0");
    }

    /* A kept tensor with its history, for a backward under create_graph=True. */
    at::Tensor with_history(const Kept &k) {
        if (k.original.defined())
            return k.original;
        if (k.input >= 0 && next_edge(static_cast<size_t>(k.input)).is_valid())
            return torch::autograd::make_variable(k.alias, next_edge(static_cast<size_t>(k.input)));
        if (k.slot >= 0)
            return torch::autograd::make_variable(k.alias, torch::autograd::Edge(getptr(), static_cast<uint32_t>(k.slot)));
        return k.alias;
    }

    void release_variables() override {
        std::lock_guard<std::mutex> lock(mutex_);
        kept.clear();
        released = true;
    }

    variable_list apply(variable_list &&grads) override {
        /* Two backward calls whose graphs share this node may run it at once from two threads
           (PyTorch's Note [Thread Safety on Autograd Node]): one at a time, the kept tensors are
           read or handed over whole, and the later one sees them released. (The mutex is taken
           before the GIL, which the engine's threads do not hold when they call a node.) */
        std::lock_guard<std::mutex> lock(mutex_);
        /* create_graph=True: the gradients are differentiated again, so they are computed from the
           kept tensors' history by the Python function (a kernel's results would carry none). */
        bool graph = at::GradMode::is_enabled();
        if (released)
            throw std::runtime_error(op + ": trying to backward through the graph a second time; specify "
                                     "retain_graph=True the first time");
        for (const Kept &k : kept) {
            if (k.alias._version() != k.version)
                throw std::runtime_error(op + ": one of the tensors its backward needs was modified by an "
                                         "in-place operation after the call (version " + std::to_string(k.alias._version()) +
                                         ", expected " + std::to_string(k.version) + ")");
        }
        /* Where the graph is not kept for another backward, the saved tensors are handed over: the
           backward then holds their last references, and a two-phase backward (Gradients.phases)
           frees a kept accumulator midway, before its products allocate theirs. */
        variable_list saved;
        saved.reserve(kept.size());
        bool hand_over = !torch::autograd::get_current_graph_task_keep_graph();
        for (Kept &k : kept)
            saved.push_back(graph ? with_history(k) : hand_over ? std::move(k.alias) : k.alias);
        if (hand_over) {  /* (a backward that runs the node again is refused, as after release_variables) */
            kept.clear();
            released = true;
        }
        for (size_t i = 0; i < grads.size(); i++) {
            if (grads[i].defined())
                continue;
            /* An output no loss reads, or one autograd does not differentiate: zeros of its shape
               (as torch.autograd.Function makes them; a derived backward takes every output's). */
            auto plain = plain_results.find(i);
            grads[i] = plain != plain_results.end() ? at::zeros(plain->second.first, plain->second.second)
                                                    : input_metadata(i).zeros_like();
        }
        size_t inputs = num_outputs();
        bool python = false;  /* whether a gradient needed comes from the backward (else all are incoming ones) */
        for (size_t i = 0; i < inputs; i++)
            python = python || ((*sources)[i] <= FIRST_RESULT && task_should_compute_output(i));
        if (!python) {
            variable_list results(inputs);
            for (size_t i = 0; i < inputs; i++) {
                Py_ssize_t source = (*sources)[i];
                if (source >= 0 && task_should_compute_output(i))
                    results[i] = passed_to_input(grads[static_cast<size_t>(source)], i);
            }
            return results;
        }
        GilHeld gil;
        variable_list results(inputs);
        int served = backward && !graph ? serve_backward(saved, grads, results) : 0;
        if (served != 0) {
            if (served < 0) {
                python_error error;
                error.persist();
                throw error;
            }
            return results;
        }
        PyObject *call_args = nullptr, *result = nullptr;
        bool failed = true;
        do {
            PyObject *saved_list = PyList_New(static_cast<Py_ssize_t>(saved.size()));
            PyObject *grads_tuple = PyTuple_New(static_cast<Py_ssize_t>(grads.size()));
            PyObject *needed = PyTuple_New(static_cast<Py_ssize_t>(inputs));
            call_args = PyTuple_New(4);
            if (saved_list == nullptr || grads_tuple == nullptr || needed == nullptr || call_args == nullptr) {
                Py_XDECREF(saved_list);
                Py_XDECREF(grads_tuple);
                Py_XDECREF(needed);
                break;
            }
            PyTuple_SET_ITEM(call_args, 0, saved_list);
            PyTuple_SET_ITEM(call_args, 1, grads_tuple);
            PyTuple_SET_ITEM(call_args, 2, needed);
            PyTuple_SET_ITEM(call_args, 3, Py_NewRef(scalars.object));
            bool wrapped = true;
            for (size_t i = 0; i < saved.size() && wrapped; i++) {
                PyObject *t = THPVariable_Wrap(saved[i]);
                wrapped = t != nullptr;
                if (wrapped)
                    PyList_SET_ITEM(saved_list, static_cast<Py_ssize_t>(i), t);
            }
            for (size_t i = 0; i < grads.size() && wrapped; i++) {
                PyObject *t = THPVariable_Wrap(grads[i]);
                wrapped = t != nullptr;
                if (wrapped)
                    PyTuple_SET_ITEM(grads_tuple, static_cast<Py_ssize_t>(i), t);
            }
            for (size_t i = 0; i < inputs && wrapped; i++)
                PyTuple_SET_ITEM(needed, static_cast<Py_ssize_t>(i), Py_NewRef(task_should_compute_output(i) ? Py_True : Py_False));
            if (!wrapped)
                break;
            saved.clear();  /* (the list holds them now: the Python function may drop them as it goes) */
            result = PyObject_Call(gradients->object, call_args, nullptr);
            if (result == nullptr)
                break;
            if (!PyTuple_Check(result) || static_cast<size_t>(PyTuple_GET_SIZE(result)) != inputs) {
                PyErr_Format(PyExc_RuntimeError, "%s: its backward returned %R, not a tuple of %zu gradients",
                             op.c_str(), result, inputs);
                break;
            }
            bool ok = true;
            for (size_t i = 0; i < inputs && ok; i++) {
                PyObject *item = PyTuple_GET_ITEM(result, static_cast<Py_ssize_t>(i));
                if (item == Py_None)
                    continue;
                if (!THPVariable_Check(item)) {
                    PyErr_Format(PyExc_RuntimeError, "%s: its backward returned %R for input %zu, not a tensor",
                                 op.c_str(), item, i);
                    ok = false;
                } else {
                    results[i] = sum_to_input(THPVariable_Unpack(item), i);
                    if (!results[i].defined()) {  /* (as a Python error, the references above released) */
                        misfit(THPVariable_Unpack(item), i);
                        ok = false;
                    }
                }
            }
            failed = !ok;
        } while (false);
        release_keeping_error(call_args);
        release_keeping_error(result);
        if (failed) {
            python_error error;  /* autograd's engine raises it again in the caller's thread */
            error.persist();
            throw error;
        }
        return results;
    }
};

/* The node, as this torch holds nodes (an intrusive_ptr in newer releases, a shared_ptr before). */
template <typename T, typename... Args>
auto make_node(Args &&...args) {
    if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, T>)
        return c10::make_intrusive<T>(std::forward<Args>(args)...);
    else
        return std::make_shared<T>(std::forward<Args>(args)...);
}

struct Formula {
    PyObject_HEAD
    std::string *op;
    std::shared_ptr<PyRef> *gradients;
    Py_ssize_t tensors;
    std::vector<Py_ssize_t> *saved_inputs;
    std::vector<Py_ssize_t> *saved_outputs;  /* the outputs kept (layout's entries that are not -1) */
    Py_ssize_t results;
    std::shared_ptr<const std::vector<Py_ssize_t>> *sources;
    std::shared_ptr<const std::vector<Py_ssize_t>> *layout;
    std::shared_ptr<PyRef> *backward;  /* null where none */
    std::vector<Py_ssize_t> *records;  /* per result, a mask of the inputs it records from (Gradients.records); empty: all */
    bool selective;  /* the backward op takes which inputs need a gradient (Gradients.selective) */
    std::vector<Py_ssize_t> *readers;  /* per saved input, a mask of the inputs whose gradients read it; 0: always read
                                          (a bit of no input: never, its shape alone) */
};

bool read_indices(PyObject *sequence, std::vector<Py_ssize_t> *into) {
    PyObject *fast = PySequence_Fast(sequence, "expected a sequence of ints");
    if (fast == nullptr)
        return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        Py_ssize_t value = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (value == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return false;
        }
        into->push_back(value);
    }
    Py_DECREF(fast);
    return true;
}

/* Formula(op, gradients, tensors, saved_inputs, saved_outputs, results, sources, backward=None, records=None,
           selective=False, readers=None):
   `saved_outputs` the outputs the backward reads, in its order, -1 for one it recomputes (passed
   as None); `sources` one int per tensor input: the index of the incoming gradient that is its
   gradient (an input the op adds to an output), NO_GRADIENT, or FIRST_RESULT - r for the backward
   op's result r (the Python function computes them); `backward` an object whose `call` serves the
   backward op's call whole or returns None (its compiled call path), or None; `records` per
   result a mask of the tensor inputs it records a graph from (bit i: input i), or None for all:
   a result none of whose inputs requires grad stays a plain tensor, as PyTorch's would; `selective`:
   the backward op takes last a list of which tensor inputs need a gradient; `readers` per saved
   input a mask of the tensor inputs whose gradients read its values (0: always read; a bit past the
   inputs': none), or None for all always read: one none of whose readers requires grad is kept as
   its shape alone. */
PyObject *Formula_new(PyTypeObject *type, PyObject *args, PyObject *) {
    const char *op;
    PyObject *gradients, *saved_inputs, *saved_outputs, *sources, *backward = Py_None, *records = Py_None,
             *readers = Py_None;
    Py_ssize_t tensors, results;
    int selective = 0;
    if (!PyArg_ParseTuple(args, "sOnOOnO|OOpO:Formula", &op, &gradients, &tensors, &saved_inputs, &saved_outputs, &results,
                          &sources, &backward, &records, &selective, &readers))
        return nullptr;
    if (!PyCallable_Check(gradients))
        return PyErr_Format(PyExc_TypeError, "Formula: gradients must be callable");
    Formula *self = reinterpret_cast<Formula *>(type->tp_alloc(type, 0));
    if (self == nullptr)
        return nullptr;
    self->op = new std::string(op);
    self->gradients = new std::shared_ptr<PyRef>(std::make_shared<PyRef>(gradients));
    self->tensors = tensors;
    self->saved_inputs = new std::vector<Py_ssize_t>();
    self->saved_outputs = new std::vector<Py_ssize_t>();
    auto layout = std::make_shared<std::vector<Py_ssize_t>>();
    self->layout = new std::shared_ptr<const std::vector<Py_ssize_t>>(layout);
    self->backward = new std::shared_ptr<PyRef>(backward == Py_None ? nullptr : std::make_shared<PyRef>(backward));
    self->results = results;
    auto source_list = std::make_shared<std::vector<Py_ssize_t>>();
    self->sources = new std::shared_ptr<const std::vector<Py_ssize_t>>(source_list);
    self->records = new std::vector<Py_ssize_t>();
    self->selective = selective != 0;
    self->readers = new std::vector<Py_ssize_t>();
    if (!read_indices(saved_inputs, self->saved_inputs) || !read_indices(saved_outputs, layout.get()) ||
        !read_indices(sources, source_list.get()) || (records != Py_None && !read_indices(records, self->records)) ||
        (readers != Py_None && !read_indices(readers, self->readers))) {
        Py_DECREF(self);
        return nullptr;
    }
    if (readers == Py_None)
        self->readers->assign(self->saved_inputs->size(), 0);
    if (self->readers->size() != self->saved_inputs->size()) {
        PyErr_Format(PyExc_ValueError, "Formula: %zd readers for %zd saved inputs", self->readers->size(),
                     self->saved_inputs->size());
        Py_DECREF(self);  /* (after the message reads its fields) */
        return nullptr;
    }
    if (records != Py_None && static_cast<Py_ssize_t>(self->records->size()) != results) {
        PyErr_Format(PyExc_ValueError, "Formula: %zd records for %zd results", self->records->size(), results);
        Py_DECREF(self);  /* (after the message reads its fields) */
        return nullptr;
    }
    if ((records != Py_None || readers != Py_None) && tensors > 62) {  /* (the masks; Gradients.node_formula makes no node then) */
        Py_DECREF(self);
        return PyErr_Format(PyExc_ValueError, "Formula: %zd tensors, at most 62", tensors);
    }
    for (Py_ssize_t slot : *layout) {
        if (slot >= 0)
            self->saved_outputs->push_back(slot);
    }
    if (static_cast<Py_ssize_t>(source_list->size()) != tensors) {
        Py_DECREF(self);
        return PyErr_Format(PyExc_ValueError, "Formula: %zd sources for %zd tensors", source_list->size(), tensors);
    }
    for (Py_ssize_t source : *source_list) {
        if (source >= results) {
            Py_DECREF(self);
            return PyErr_Format(PyExc_ValueError, "Formula: source %zd is not one of the %zd incoming gradients",
                                source, results);
        }
    }
    for (Py_ssize_t i : *self->saved_inputs) {
        if (i < 0 || i >= tensors) {
            Py_DECREF(self);
            return PyErr_Format(PyExc_ValueError, "Formula: saved input %zd is not one of the %zd tensors", i, tensors);
        }
    }
    return reinterpret_cast<PyObject *>(self);
}

void Formula_dealloc(Formula *self) {
    delete self->op;
    delete self->gradients;  /* (the GIL is held: PyRef's release takes it again, which is allowed) */
    delete self->saved_inputs;
    delete self->saved_outputs;
    delete self->sources;
    delete self->layout;
    delete self->backward;
    delete self->records;
    delete self->readers;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

/* Whether `module` (when imported) has the attribute `name` set true; -1 with the error set. */
int imported_flag(PyObject *module_name, const char *name) {
    PyObject *module = PyImport_GetModule(module_name);
    if (module == nullptr)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *value = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    if (value == nullptr) {  /* (another torch's names: taken as off) */
        PyErr_Clear();
        return 0;
    }
    int set = PyObject_IsTrue(value);
    Py_DECREF(value);
    return set;
}

PyObject *compiled_autograd_name = nullptr;  /* interned in PyInit */

/* Whether compiled autograd runs now, and so may run this call's backward: inside a frame
   torch.compile compiled with torch._dynamo.config.compiled_autograd set (graph breaks' eager
   calls included), or its engine enabled by hand. It traces each node through compiled_args,
   which this node has not (see TilegenNode::compiled_args); torch.autograd.Function's node it
   traces. (The config flag itself is read through a Python __getattr__, microseconds a call: a
   backward compiled autograd runs outside such a frame meets the node's error.) -1: error. */
int compiled_autograd_may_run() {
    return imported_flag(compiled_autograd_name, "compiled_autograd_enabled");
}

/* formula.usable() -> bool: whether attach would attach: no saved-tensor hooks are set, and
   compiled autograd will not run the backward. */
PyObject *Formula_usable(Formula *, PyObject *) {
    if (at::SavedTensorDefaultHooks::get_hooks().has_value())
        Py_RETURN_FALSE;
    int compiled = compiled_autograd_may_run();
    return compiled < 0 ? nullptr : PyBool_FromLong(!compiled);
}

/* Whether an input in `mask` (bit i: input i) requires grad. */
bool any_requires_grad(Py_ssize_t mask, const variable_list &inputs) {
    for (size_t i = 0; i < inputs.size(); i++) {
        if (((mask >> i) & 1) && inputs[i].defined() && inputs[i].requires_grad())
            return true;
    }
    return false;
}

/* Whether result j records a graph from an input that requires grad (`records` empty: from every
   input, and some requires grad, or no node would be attached). */
bool records_any(const std::vector<Py_ssize_t> &records, Py_ssize_t j, const variable_list &inputs) {
    return records.empty() || any_requires_grad(records[static_cast<size_t>(j)], inputs);
}

/* formula.attach(args, outputs): the outputs (a tuple, the results first) made the results of one
   node whose inputs are args' tensors. Returns True; False, attaching nothing, where saved-tensor
   hooks are set (torch.autograd.graph.saved_tensors_hooks: checkpointing, offloading), which a
   Python autograd.Function's saved tensors go through and this node's would not. */
PyObject *Formula_attach(Formula *self, PyObject *const *argv, Py_ssize_t count) {
    if (count != 2 || !PyTuple_Check(argv[0]) || !PyTuple_Check(argv[1]))
        return PyErr_Format(PyExc_TypeError, "attach(args, outputs): two tuples");
    if (at::SavedTensorDefaultHooks::get_hooks().has_value())
        Py_RETURN_FALSE;
    PyObject *args = argv[0], *outputs = argv[1];
    if (PyTuple_GET_SIZE(args) < self->tensors || PyTuple_GET_SIZE(outputs) < self->results)
        return PyErr_Format(PyExc_ValueError, "%s: attach got %zd arguments and %zd outputs, expected %zd tensors and %zd results",
                            self->op->c_str(), PyTuple_GET_SIZE(args), PyTuple_GET_SIZE(outputs), self->tensors, self->results);
    HANDLE_TH_ERRORS
    variable_list inputs;
    inputs.reserve(static_cast<size_t>(self->tensors));
    for (Py_ssize_t i = 0; i < self->tensors; i++) {
        PyObject *arg = PyTuple_GET_ITEM(args, i);
        if (!THPVariable_Check(arg))
            return PyErr_Format(PyExc_TypeError, "%s: argument %zd is not a tensor", self->op->c_str(), i);
        inputs.push_back(THPVariable_Unpack(arg));
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(outputs); j++) {
        if (!THPVariable_Check(PyTuple_GET_ITEM(outputs, j)))
            return PyErr_Format(PyExc_TypeError, "%s: output %zd is not a tensor", self->op->c_str(), j);
    }
    for (Py_ssize_t j : *self->saved_outputs) {  /* (checked before any output is given the node) */
        if (j >= PyTuple_GET_SIZE(outputs))
            return PyErr_Format(PyExc_ValueError, "%s: saved output %zd is not among the %zd outputs", self->op->c_str(), j,
                                PyTuple_GET_SIZE(outputs));
    }
    PyObject *scalars = PyTuple_GetSlice(args, self->tensors, PyTuple_GET_SIZE(args));
    if (scalars == nullptr)
        return nullptr;
    auto node = make_node<TilegenNode>(*self->op, *self->gradients, scalars, torch::autograd::collect_next_edges(inputs));
    node->sources = *self->sources;
    node->layout = *self->layout;
    node->saved_inputs = self->saved_inputs->size();
    node->backward = *self->backward;
    node->selective = self->selective;
    Py_DECREF(scalars);
    node->kept.reserve(self->saved_inputs->size() + self->saved_outputs->size());
    for (size_t s = 0; s < self->saved_inputs->size(); s++) {
        const at::Tensor &input = inputs[static_cast<size_t>((*self->saved_inputs)[s])];
        Py_ssize_t readers = (*self->readers)[s];
        bool read = readers == 0 || any_requires_grad(readers, inputs);
        node->kept.push_back(keep(read ? input : shape_only(input)));
        if (read)
            node->kept.back().original = input;
        else
            node->kept.back().input = (*self->saved_inputs)[s];
    }
    std::vector<Py_ssize_t> historied;  /* the results given this node as their history */
    node->shapes.reserve(inputs.size());
    node->dtypes.reserve(inputs.size());
    for (const at::Tensor &t : inputs) {
        node->shapes.emplace_back(t.sizes().begin(), t.sizes().end());
        node->dtypes.push_back(t.scalar_type());
    }
    for (Py_ssize_t j = 0; j < self->results; j++) {
        const at::Tensor &output = THPVariable_Unpack(PyTuple_GET_ITEM(outputs, j));
        /* A result of a dtype autograd does not differentiate (a bool mask, an int), or one that
           records from no input requiring grad, stays a plain tensor, as torch.autograd.Function
           leaves it (and one marked non-differentiable); its slot keeps the others' numbering. */
        if (records_any(*self->records, j, inputs) && torch::autograd::isDifferentiableType(output.scalar_type())) {
            torch::autograd::set_history(output, node);
            historied.push_back(j);
        } else {
            node->plain_results[node->add_input_metadata(Node::undefined_input())] = {
                std::vector<int64_t>(output.sizes().begin(), output.sizes().end()), output.options()};
        }
    }
    for (Py_ssize_t j : *self->saved_outputs) {
        node->kept.push_back(keep(THPVariable_Unpack(PyTuple_GET_ITEM(outputs, j))));
        if (std::find(historied.begin(), historied.end(), j) != historied.end())
            node->kept.back().slot = j;
    }
    Py_RETURN_TRUE;
    END_HANDLE_TH_ERRORS
}

PyMethodDef Formula_methods[] = {
    {"usable", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Formula_usable)), METH_NOARGS,
     "usable() -> bool: whether attach would attach (saved-tensor hooks set: not)"},
    {"attach", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Formula_attach)), METH_FASTCALL,
     "attach(args, outputs) -> bool: the outputs made the results of one autograd node over args' tensors"},
    {nullptr, nullptr, 0, nullptr},
};

/* The type's fields are set one by one in PyInit (C++ has no designated initializers for it). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
PyTypeObject FormulaType = {PyVarObject_HEAD_INIT(nullptr, 0)};
#pragma GCC diagnostic pop

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tilegen_autograd_node", nullptr, -1, nullptr,
                          nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__tilegen_autograd_node(void) {
    call_name = PyUnicode_InternFromString("call");
    compiled_autograd_name = PyUnicode_InternFromString("torch._dynamo.compiled_autograd");
    if (call_name == nullptr || compiled_autograd_name == nullptr)
        return nullptr;
    FormulaType.tp_name = "_tilegen_autograd_node.Formula";
    FormulaType.tp_basicsize = sizeof(Formula);
    FormulaType.tp_flags = Py_TPFLAGS_DEFAULT;
    FormulaType.tp_new = Formula_new;
    FormulaType.tp_dealloc = reinterpret_cast<destructor>(Formula_dealloc);
    FormulaType.tp_methods = Formula_methods;
    FormulaType.tp_doc = "Formula(op, gradients, tensors, saved_inputs, saved_outputs, results, sources, backward=None, records=None, selective=False, readers=None)";
    if (PyType_Ready(&FormulaType) < 0)
        return nullptr;
    PyObject *module = PyModule_Create(&module_def);
    if (module == nullptr)
        return nullptr;
    if (PyModule_AddObjectRef(module, "Formula", reinterpret_cast<PyObject *>(&FormulaType)) < 0) {
        Py_DECREF(module);
        return nullptr;
    }
    return module;
}
