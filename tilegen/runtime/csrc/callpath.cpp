/* The compiled call path: an op's repeat calls served by one C++ call, allocation and launch
   included.

   A `Table` per op learns, from a call the Python path served, the call's signature (each input
   tensor's sizes, strides, dtype, device and 16-byte alignment, and what Triton specializes a
   scalar on), its outputs' shapes and dtypes, and the launch: the compiled binary, its grid and
   its parameters, the fixed ones converted once (`prepare`). A later call with that signature
   costs the signature's read, at::empty for each output and one cuLaunchKernel. Any other call
   returns None and the Python path (Triton's own launch) serves it; so does a call on another
   device, on another stream than a learned launch that holds scratch memory, with one of
   Triton's launch hooks listening (a profiler), or under a torch dispatch mode (fake tensors,
   make_fx, export: the registered op must see those calls).

   A launch that loads through tensor descriptors (TMA) takes, for each, a CUtensorMap by value
   and the descriptor's shape and strides; the shape and strides are the signature's, and the map
   is encoded on each call for the address the call gives (cuTensorMapEncodeTiled, as Triton's own
   launcher does), with the parameters Triton's compiler chose for it (swizzle, box).

   libcuda is opened when the module loads, so the module builds and loads without a GPU (the
   CPU tests try tables through `explain`, which launches nothing). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <dlfcn.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

/* ---- the driver: the entry points used, declared here so that no CUDA header is needed ---- */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
/* CUDA's CUtensorMap: 128 opaque bytes, 64-byte aligned; its enums are ints. */
struct alignas(64) CUtensorMap {
    uint64_t opaque[16];
};

CUresult (*cuLaunchKernel_)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **, void **) = nullptr;
CUresult (*cuCtxGetCurrent_)(CUcontext *) = nullptr;
CUresult (*cuCtxSetCurrent_)(CUcontext) = nullptr;
CUresult (*cuDeviceGet_)(CUdevice *, int) = nullptr;
CUresult (*cuDevicePrimaryCtxRetain_)(CUcontext *, CUdevice) = nullptr;
CUresult (*cuGetErrorString_)(CUresult, const char **) = nullptr;
/* Optional (CUDA 12+): without it, launches through tensor descriptors stay with Triton's. */
CUresult (*cuTensorMapEncodeTiled_)(CUtensorMap *, int, uint32_t, void *, const uint64_t *, const uint64_t *,
                                    const uint32_t *, const uint32_t *, int, int, int, int) = nullptr;
const char *driver_error = "libcuda was not opened";

template <typename T>
void bind_symbol(void *lib, const char *name, T &slot) {
    slot = reinterpret_cast<T>(dlsym(lib, name));
}

void open_driver() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        driver_error = "libcuda.so.1 could not be opened";
        return;
    }
    bind_symbol(lib, "cuCtxGetCurrent", cuCtxGetCurrent_);
    bind_symbol(lib, "cuCtxSetCurrent", cuCtxSetCurrent_);
    bind_symbol(lib, "cuDeviceGet", cuDeviceGet_);
    bind_symbol(lib, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain_);
    bind_symbol(lib, "cuGetErrorString", cuGetErrorString_);
    bind_symbol(lib, "cuTensorMapEncodeTiled", cuTensorMapEncodeTiled_);
    if (cuCtxGetCurrent_ && cuCtxSetCurrent_ && cuDeviceGet_ && cuDevicePrimaryCtxRetain_ && cuGetErrorString_)
        bind_symbol(lib, "cuLaunchKernel", cuLaunchKernel_);  /* set last: it marks the driver ready */
    if (cuLaunchKernel_ == nullptr)
        driver_error = "libcuda.so.1 lacks a driver entry point";
}

/* ---- plans: one launch, its fixed parameters converted once ---- */

constexpr int MAX_PARAMS = 96;
constexpr int MAX_MAPS = 8;  /* tensor maps a launch can take */
const char CODES[] = "pbhilBHIKfdD";

/* Each parameter has an 8-byte slot; the kernel reads its own width from the start of it. A
   tensor map's slot (code D) holds which of the call's encoded maps the parameter is. */
struct Plan {
    uint64_t function;
    uint32_t grid[3];
    uint32_t threads;
    uint32_t shared;
    int32_t device;
    int32_t params;
    int32_t varying;  /* the first `varying` parameters come with each launch */
    char codes[MAX_PARAMS];
    uint64_t values[MAX_PARAMS];
};

PyObject *data_ptr_name, *enter_name, *exit_name, *calls_name, *usable_name, *attach_name;
PyTypeObject *parameter_type = nullptr;  /* torch.nn.Parameter */

/* Whether `value` is a tensor that holds its own data as torch.Tensor does: a torch.Tensor or an
   nn.Parameter (a model's weights), not a subclass that overrides what torch calls do. */
bool plain_tensor(PyObject *value) {
    return THPVariable_CheckExact(value) || (parameter_type != nullptr && Py_TYPE(value) == parameter_type);
}

/* Convert `value` by type code into `slot`: p pointer (an int, None for null, or a tensor),
   b h i l signed and B H I K unsigned integers of 8 to 64 bits, f float32, d float64.
   0, or -1 with an exception set. */
int convert(char code, PyObject *value, uint64_t *slot) {
    *slot = 0;
    if (code == 'p') {
        if (value == Py_None)
            return 0;
        PyObject *address = PyLong_Check(value) ? Py_NewRef(value) : PyObject_CallMethodNoArgs(value, data_ptr_name);
        if (address == nullptr) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError))
                PyErr_Format(PyExc_TypeError, "launch: a pointer takes a tensor, an address or None, not %s",
                             Py_TYPE(value)->tp_name);
            return -1;
        }
        *slot = PyLong_AsUnsignedLongLong(address);
        Py_DECREF(address);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (code == 'f' || code == 'd') {
        double x = PyFloat_AsDouble(value);
        if (x == -1.0 && PyErr_Occurred())
            return -1;
        if (code == 'f') {
            if (std::isfinite(x) && std::fabs(x) > FLT_MAX) {
                char message[96];  /* PyErr_Format has no %g */
                snprintf(message, sizeof message, "launch: %g does not fit in float32", x);
                PyErr_SetString(PyExc_OverflowError, message);
                return -1;
            }
            float y = static_cast<float>(x);
            memcpy(slot, &y, sizeof y);
        } else {
            memcpy(slot, &x, sizeof x);
        }
        return 0;
    }
    int width;
    bool is_signed = code == 'b' || code == 'h' || code == 'i' || code == 'l';
    switch (code) {
        case 'b': case 'B': width = 1; break;
        case 'h': case 'H': width = 2; break;
        case 'i': case 'I': width = 4; break;
        case 'l': case 'K': width = 8; break;
        default:
            PyErr_Format(PyExc_ValueError, "launch: unknown type code '%c'", code);
            return -1;
    }
    if (is_signed) {
        long long x = PyLong_AsLongLong(value);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (width < 8 && (x < -(1LL << (8 * width - 1)) || x >= (1LL << (8 * width - 1)))) {
            PyErr_Format(PyExc_OverflowError, "launch: %lld does not fit in %d bits", x, 8 * width);
            return -1;
        }
        memcpy(slot, &x, width);  /* little-endian: the low bytes come first */
    } else {
        unsigned long long x = PyLong_AsUnsignedLongLong(value);
        if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred())
            return -1;
        if (width < 8 && x >= (1ULL << (8 * width))) {
            PyErr_Format(PyExc_OverflowError, "launch: %llu does not fit in %d bits", x, 8 * width);
            return -1;
        }
        memcpy(slot, &x, width);
    }
    return 0;
}

/* prepare(function, grid_x, grid_y, grid_z, threads, shared, device, codes, varying, tail) -> bytes */
PyObject *prepare(PyObject *, PyObject *args) {
    Plan plan;
    memset(&plan, 0, sizeof plan);
    unsigned long long function;
    const char *codes;
    Py_ssize_t code_count;
    PyObject *tail;
    if (!PyArg_ParseTuple(args, "KIIIIIis#iO!", &function, &plan.grid[0], &plan.grid[1], &plan.grid[2],
                          &plan.threads, &plan.shared, &plan.device, &codes, &code_count, &plan.varying,
                          &PyTuple_Type, &tail))
        return nullptr;
    if (code_count > MAX_PARAMS) {
        PyErr_Format(PyExc_ValueError, "launch: %zd parameters, at most %d", code_count, MAX_PARAMS);
        return nullptr;
    }
    if (plan.varying < 0 || plan.varying > code_count || PyTuple_GET_SIZE(tail) != code_count - plan.varying) {
        PyErr_Format(PyExc_ValueError, "launch: %zd type codes for %d varying and %zd fixed values", code_count,
                     plan.varying, PyTuple_GET_SIZE(tail));
        return nullptr;
    }
    plan.function = function;
    plan.params = static_cast<int32_t>(code_count);
    memcpy(plan.codes, codes, code_count);
    for (Py_ssize_t i = 0; i < code_count; i++) {
        /* Every code is checked here, so that a launch meets none it does not know. */
        if (plan.codes[i] == '\0' || strchr(CODES, plan.codes[i]) == nullptr) {
            PyErr_Format(PyExc_ValueError, "launch: unknown type code '%c'", plan.codes[i]);
            return nullptr;
        }
        if (plan.codes[i] == 'D' && i >= plan.varying) {
            PyErr_SetString(PyExc_ValueError, "launch: a tensor map is encoded per call, never a fixed value");
            return nullptr;
        }
        if (i >= plan.varying &&
            convert(plan.codes[i], PyTuple_GET_ITEM(tail, i - plan.varying), &plan.values[i]) < 0)
            return nullptr;
    }
    return PyBytes_FromStringAndSize(reinterpret_cast<const char *>(&plan), sizeof plan);
}

/* describe(plan) -> (function, grid, threads, shared, device, codes, varying, fixed values) */
PyObject *describe(PyObject *, PyObject *arg) {
    if (!PyBytes_CheckExact(arg) || PyBytes_GET_SIZE(arg) != static_cast<Py_ssize_t>(sizeof(Plan))) {
        PyErr_SetString(PyExc_TypeError, "launch: describe() takes a plan from prepare()");
        return nullptr;
    }
    Plan plan;
    memcpy(&plan, PyBytes_AS_STRING(arg), sizeof plan);
    PyObject *values = PyTuple_New(plan.params - plan.varying);
    if (values == nullptr)
        return nullptr;
    for (int i = plan.varying; i < plan.params; i++)
        PyTuple_SET_ITEM(values, i - plan.varying, PyLong_FromUnsignedLongLong(plan.values[i]));
    return Py_BuildValue("K(III)IIis#iN", static_cast<unsigned long long>(plan.function), plan.grid[0],
                         plan.grid[1], plan.grid[2], plan.threads, plan.shared, plan.device, plan.codes,
                         static_cast<Py_ssize_t>(plan.params), plan.varying, values);
}

int ensure_context(int device) {
    CUcontext context = nullptr;
    if (cuCtxGetCurrent_(&context) == 0 && context != nullptr)
        return 0;
    /* A thread that has not touched CUDA yet: make the device's primary context current. */
    CUdevice handle;
    if (cuDeviceGet_(&handle, device) != 0 || cuDevicePrimaryCtxRetain_(&context, handle) != 0 ||
        cuCtxSetCurrent_(context) != 0) {
        PyErr_Format(PyExc_RuntimeError, "launch: no CUDA context for device %d", device);
        return -1;
    }
    return 0;
}

/* One cuLaunchKernel of a filled plan on `stream`, its tensor maps in `maps`: 0, or -1 with an
   exception set. */
int launch(const Plan &plan, void *stream, CUtensorMap *maps) {
    if (plan.grid[0] == 0 || plan.grid[1] == 0 || plan.grid[2] == 0)
        return 0;  /* no programs: nothing to launch (as Triton's launcher does) */
    if (cuLaunchKernel_ == nullptr) {
        PyErr_Format(PyExc_RuntimeError, "launch: %s", driver_error);
        return -1;
    }
    if (ensure_context(plan.device) < 0)
        return -1;
    void *params[MAX_PARAMS];
    for (int i = 0; i < plan.params; i++)
        params[i] = plan.codes[i] == 'D' ? static_cast<void *>(&maps[plan.values[i]])
                                         : const_cast<uint64_t *>(&plan.values[i]);
    CUresult result;
    /* The launch can wait for room in a full queue: let other threads run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    result = cuLaunchKernel_(reinterpret_cast<CUfunction>(static_cast<uintptr_t>(plan.function)), plan.grid[0],
                             plan.grid[1], plan.grid[2], plan.threads, 1, 1, plan.shared,
                             static_cast<CUstream>(stream), params, nullptr);
    Py_END_ALLOW_THREADS
    if (result != 0) {
        const char *message = nullptr;
        cuGetErrorString_(result, &message);
        PyErr_Format(PyExc_RuntimeError, "launch: cuLaunchKernel failed with error %d (%s)", result,
                     message ? message : "unknown");
        return -1;
    }
    return 0;
}

/* 1 where the hook named `name` on `hooks` would be called, 0 where not, -1 on error. */
int hook_listens(PyObject *hooks, PyObject *name) {
    PyObject *hook = PyObject_GetAttr(hooks, name);
    if (hook == nullptr)
        return -1;
    if (hook == Py_None) {
        Py_DECREF(hook);
        return 0;
    }
    PyObject *calls = PyObject_GetAttr(hook, calls_name);
    Py_DECREF(hook);
    if (calls == nullptr) {  /* a plain callable: it listens */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    int listens = PyObject_IsTrue(calls);
    Py_DECREF(calls);
    return listens;
}

/* 1 where a launch on `device` goes ahead here: current_device() returns it, and no launch hook
   on `hooks` would be called; 0 where not; -1 with an exception set. */
int launches_here(PyObject *current_device, PyObject *hooks, int device) {
    PyObject *current = PyObject_CallNoArgs(current_device);
    if (current == nullptr)
        return -1;
    long index = PyLong_AsLong(current);
    Py_DECREF(current);
    if (index == -1 && PyErr_Occurred())
        return -1;
    if (index != device)
        return 0;
    int listens = hook_listens(hooks, enter_name);
    if (listens == 0)
        listens = hook_listens(hooks, exit_name);
    return listens < 0 ? -1 : !listens;
}

/* Into `stream`, the stream stream_of(device) returns; 0, or -1 with an exception set. */
int current_stream(PyObject *stream_of, int device, uintptr_t *stream) {
    PyObject *index = PyLong_FromLong(device);
    if (index == nullptr)
        return -1;
    PyObject *found = PyObject_CallOneArg(stream_of, index);
    Py_DECREF(index);
    if (found == nullptr)
        return -1;
    *stream = reinterpret_cast<uintptr_t>(PyLong_AsVoidPtr(found));
    Py_DECREF(found);
    return *stream == 0 && PyErr_Occurred() ? -1 : 0;
}

/* ---- tables: an op's learned calls ---- */

/* Entries per table: enough for any steady workload, bounded for a shape sweep (emptied when full). */
constexpr size_t MAX_ENTRIES = 4096;
constexpr size_t MAX_OUTPUTS = 8;

/* Where a varying parameter's value comes from on each call. */
struct Source {
    /* FIXED: a value the signature fixes, in the plan since learning (a descriptor's shape). */
    enum Kind { ARGUMENT, OUTPUT, HELD, NULL_POINTER, FIXED, TENSOR_MAP } kind;
    int index;  /* of the argument, the output, the held tensor or the entry's tensor map */
};

/* A tensor map, encoded on each call for the address of its tensor; the rest is the signature's. */
struct TensorMapSpec {
    Source base;  /* the tensor mapped: an argument or an output */
    int data_type, swizzle, fill;
    uint32_t rank;
    uint64_t dims[5];     /* innermost first */
    uint64_t strides[5];  /* in bytes, of the dimensions after the innermost */
    uint32_t box[5];
};

/* Encode `spec` for `address` into `map`: 0, or the driver's error. */
CUresult encode(const TensorMapSpec &spec, uintptr_t address, CUtensorMap *map) {
    static const uint32_t element_strides[5] = {1, 1, 1, 1, 1};
    const int interleave_none = 0, l2_promotion_128b = 2;  /* as Triton's launcher encodes its maps */
    return cuTensorMapEncodeTiled_(map, spec.data_type, spec.rank, reinterpret_cast<void *>(address), spec.dims,
                                   spec.strides, spec.box, element_strides, interleave_none, spec.swizzle,
                                   l2_promotion_128b, spec.fill);
}

struct Entry {
    Plan plan;  /* the fixed values in place; the varying slots are filled per call */
    std::vector<Source> sources;  /* one per varying parameter */
    std::vector<TensorMapSpec> maps;
    std::vector<std::vector<int64_t>> output_sizes;
    std::vector<at::ScalarType> output_dtypes;
    /* Scratch tensors the launch reads besides the call's (split-K partial sums): they serve
       calls on the stream the entry was learned on, where launches run in order. */
    std::vector<at::Tensor> held;
    uintptr_t stream = 0;
    at::Device device = at::Device(at::kCPU);
    bool tuple_result = false;
};

struct Table {
    PyObject_HEAD
    vectorcallfunc vectorcall;  /* table(*args) goes straight to Table_call */
    PyObject *current_device;
    PyObject *stream_of;
    PyObject *hooks;
    /* Shared, so that a call keeps its entry while Python code it calls (the stream, the hooks)
       lets another thread change the table. */
    std::unordered_map<std::string, std::shared_ptr<const Entry>> *entries;
    std::string *key;  /* scratch for the key of the call being served */
    unsigned long long hits;
    /* The op's autograd node maker (autograd_node.cpp's Formula) or None: with one, a call whose
       tensors require grad is served too, and the node attached to its results. */
    PyObject *formula;
};

template <typename T>
void put(std::string &key, T value) {
    key.append(reinterpret_cast<const char *>(&value), sizeof value);
}

/* Append to `key` what a launch for these arguments depends on (tilegen.schema's call
   signature rule): for a tensor its dtype, device, sizes, strides and 16-byte alignment; for an
   int what Triton specializes it on (its value when small, else its divisibility by 16 and its
   high bits); for a float whether it is past float32's range; for a list of bools (a backward op's
   gradients asked for) its values; for any other scalar its type. False
   for an argument it does not know. A tensor that requires grad (grad mode on) is refused unless
   `grad` is given; there it is set. */
bool append_key(std::string &key, PyObject *const *args, Py_ssize_t count, bool *grad) {
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *arg = args[i];
        if (plain_tensor(arg)) {
            const at::Tensor &t = THPVariable_Unpack(arg);
            /* A tensor that requires grad belongs to autograd while grad mode is on: the Python path
               decides, unless the op's node can be attached here. With it off (torch.no_grad(),
               inference with parameters) the call records nothing, and is served here like any other. */
            /* (A dual tensor's tangent, forward-mode AD's: the Python path refuses it.) */
            if (!t.defined() || t.is_neg() || t.is_conj() || t.layout() != at::kStrided || t._fw_grad(0).defined())
                return false;
            if (t.requires_grad() && at::GradMode::is_enabled()) {
                if (grad == nullptr)
                    return false;
                *grad = true;
            }
            put(key, 'T');
            put(key, static_cast<int8_t>(t.scalar_type()));
            put(key, static_cast<int8_t>(t.device().type()));
            put(key, static_cast<int8_t>(t.device().index()));
            put(key, static_cast<int8_t>(t.dim()));
            for (int64_t size : t.sizes())
                put(key, size);
            for (int64_t stride : t.strides())
                put(key, stride);
            put(key, static_cast<uint8_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16));
        } else if (PyFloat_CheckExact(arg)) {
            /* A finite value past float32's range has a key of its own: the Python path decides on
               it (refused where the math is float32, runtime.checks.check_float_range). */
            double x = PyFloat_AS_DOUBLE(arg);
            put(key, std::isfinite(x) && std::fabs(x) > FLT_MAX ? 'F' : 'f');
        } else if (PyBool_Check(arg)) {
            put(key, arg == Py_True ? 'Y' : 'N');
        } else if (PyLong_CheckExact(arg)) {
            int overflow = 0;
            long long value = PyLong_AsLongLongAndOverflow(arg, &overflow);
            if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return false;
            }
            if (-16 < value && value < 16) {
                put(key, 's');
                put(key, value);
            } else {
                put(key, 'i');
                put(key, value & 15);
                put(key, value >> 31);
            }
        } else if (arg == Py_None) {
            put(key, 'n');
        } else if (PyList_CheckExact(arg)) {
            /* A list of bools: which gradients a backward op computes (Gradients.selective). */
            put(key, 'L');
            put(key, static_cast<int64_t>(PyList_GET_SIZE(arg)));
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(arg); j++) {
                PyObject *item = PyList_GET_ITEM(arg, j);
                if (!PyBool_Check(item))
                    return false;
                put(key, item == Py_True ? 'Y' : 'N');
            }
        } else {
            return false;
        }
    }
    return true;
}

PyObject *Table_call(Table *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

PyObject *Table_new(PyTypeObject *type, PyObject *args, PyObject *) {
    PyObject *current_device, *stream_of, *hooks;
    if (!PyArg_ParseTuple(args, "OOO:Table", &current_device, &stream_of, &hooks))
        return nullptr;
    Table *self = reinterpret_cast<Table *>(type->tp_alloc(type, 0));
    if (self == nullptr)
        return nullptr;
    self->vectorcall = reinterpret_cast<vectorcallfunc>(Table_call);
    self->current_device = Py_NewRef(current_device);
    self->stream_of = Py_NewRef(stream_of);
    self->hooks = Py_NewRef(hooks);
    self->entries = new std::unordered_map<std::string, std::shared_ptr<const Entry>>();
    self->key = new std::string();
    self->hits = 0;
    self->formula = Py_NewRef(Py_None);
    return reinterpret_cast<PyObject *>(self);
}

int Table_traverse(Table *self, visitproc visit, void *arg) {
    Py_VISIT(self->current_device);
    Py_VISIT(self->stream_of);
    Py_VISIT(self->hooks);
    Py_VISIT(self->formula);
    return 0;
}

int Table_clear(Table *self) {
    Py_CLEAR(self->current_device);
    Py_CLEAR(self->stream_of);
    Py_CLEAR(self->hooks);
    Py_CLEAR(self->formula);
    return 0;
}

void Table_dealloc(Table *self) {
    PyObject_GC_UnTrack(self);
    Table_clear(self);
    delete self->entries;
    delete self->key;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

/* Whether torch.func's transforms (grad, vmap) are active: their tensors are wrappers, and autograd
   at their level is theirs. */
bool functorch_active() {
    return c10::impl::tls_local_dispatch_key_set().included_.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode);
}

/* The learned entry for a call with these arguments, or none. With `grad`, a call whose tensors
   require grad is found too (and *grad set), where the table has a formula to attach. */
std::shared_ptr<const Entry> find(Table *self, PyObject *const *args, Py_ssize_t count, bool *grad = nullptr) {
    std::string &key = *self->key;
    key.clear();
    if (grad != nullptr && (self->formula == nullptr || self->formula == Py_None || functorch_active()))
        grad = nullptr;
    try {
        if (!append_key(key, args, count, grad))
            return nullptr;
    } catch (...) {  /* a tensor torch cannot read the address of: the Python path says why */
        return nullptr;
    }
    auto found = self->entries->find(key);
    return found == self->entries->end() ? nullptr : found->second;
}

PyObject *wrap_outputs(const Entry &entry, at::Tensor *outputs) {
    if (!entry.tuple_result)
        return THPVariable_Wrap(std::move(outputs[0]));
    size_t count = entry.output_sizes.size();
    PyObject *result = PyTuple_New(static_cast<Py_ssize_t>(count));
    if (result == nullptr)
        return nullptr;
    for (size_t j = 0; j < count; j++) {
        PyObject *wrapped = THPVariable_Wrap(std::move(outputs[j]));
        if (wrapped == nullptr) {
            Py_DECREF(result);
            return nullptr;
        }
        PyTuple_SET_ITEM(result, static_cast<Py_ssize_t>(j), wrapped);
    }
    return result;
}

/* `result` (the op's, a tensor or a tuple) made the results of the op's autograd node over the
   call's arguments (formula.attach); `result` itself, or null with the error set. */
PyObject *attach(PyObject *formula, PyObject *const *args, Py_ssize_t count, PyObject *result) {
    PyObject *call_args = PyTuple_New(count);
    PyObject *outputs = PyTuple_Check(result) ? Py_NewRef(result) : PyTuple_Pack(1, result);
    PyObject *attached = nullptr;
    if (call_args != nullptr && outputs != nullptr) {
        for (Py_ssize_t i = 0; i < count; i++)
            PyTuple_SET_ITEM(call_args, i, Py_NewRef(args[i]));
        attached = PyObject_CallMethodObjArgs(formula, attach_name, call_args, outputs, nullptr);
    }
    Py_XDECREF(call_args);
    Py_XDECREF(outputs);
    if (attached == nullptr) {
        Py_DECREF(result);
        return nullptr;
    }
    Py_DECREF(attached);
    return result;
}

/* The op's result for a call with a learned signature, launched here; None for any other call,
   and for one on another device or stream or with a launch hook listening. Given `explained`, it
   launches nothing and leaves there the plan it would launch, every slot filled (for tests). */
PyObject *serve(Table *self, PyObject *const *args, Py_ssize_t count, PyObject **explained) {
    if (c10::impl::TorchDispatchModeTLS::any_modes_set() || torch::jit::tracer::isTracing())
        Py_RETURN_NONE;  /* something traces or intercepts torch calls: the registered op serves */
    bool grad = false;
    std::shared_ptr<const Entry> entry = find(self, args, count, &grad);
    if (!entry)
        Py_RETURN_NONE;
    if (grad) {  /* the node cannot be attached (saved-tensor hooks are set): the Python path records one */
        PyObject *usable = PyObject_CallMethodNoArgs(self->formula, usable_name);
        if (usable == nullptr)
            return nullptr;
        Py_DECREF(usable);
        if (usable != Py_True)
            Py_RETURN_NONE;
    }
    int here = launches_here(self->current_device, self->hooks, entry->plan.device);
    if (here <= 0)
        return here < 0 ? nullptr : Py_NewRef(Py_None);
    uintptr_t stream;
    if (current_stream(self->stream_of, entry->plan.device, &stream) < 0)
        return nullptr;
    if (!entry->held.empty() && stream != entry->stream)
        Py_RETURN_NONE;  /* its scratch memory serves one stream: the Python path finds another's */
    size_t output_count = entry->output_sizes.size();
    at::Tensor outputs[MAX_OUTPUTS];
    try {
        for (size_t j = 0; j < output_count; j++)
            outputs[j] = at::empty(entry->output_sizes[j],
                                   at::TensorOptions().dtype(entry->output_dtypes[j]).device(entry->device));
    } catch (...) {  /* out of memory, say: the Python path raises torch's own error */
        Py_RETURN_NONE;
    }
    Plan plan;
    memcpy(&plan, &entry->plan, sizeof plan);  /* a copy per call: the entry is shared between threads */
    CUtensorMap maps[MAX_MAPS];
    for (int i = 0; i < plan.varying; i++) {
        const Source &source = entry->sources[i];
        switch (source.kind) {
            case Source::NULL_POINTER:
                plan.values[i] = 0;
                break;
            case Source::FIXED:
                break;
            case Source::TENSOR_MAP: {
                const TensorMapSpec &spec = entry->maps[source.index];
                const at::Tensor &base = spec.base.kind == Source::OUTPUT ? outputs[spec.base.index]
                                                                          : THPVariable_Unpack(args[spec.base.index]);
                uintptr_t address = reinterpret_cast<uintptr_t>(base.data_ptr());
                if (explained != nullptr) {
                    plan.values[i] = address;  /* what the map would be encoded for */
                    break;
                }
                if (cuTensorMapEncodeTiled_ == nullptr || encode(spec, address, &maps[source.index]) != 0)
                    Py_RETURN_NONE;  /* Triton's launch encodes it again, and says why it cannot */
                plan.values[i] = static_cast<uint64_t>(source.index);
                break;
            }
            case Source::OUTPUT:
                plan.values[i] = reinterpret_cast<uintptr_t>(outputs[source.index].data_ptr());
                break;
            case Source::HELD:
                plan.values[i] = reinterpret_cast<uintptr_t>(entry->held[source.index].data_ptr());
                break;
            case Source::ARGUMENT:
                if (plan.codes[i] == 'p') {
                    plan.values[i] = reinterpret_cast<uintptr_t>(THPVariable_Unpack(args[source.index]).data_ptr());
                } else if (convert(plan.codes[i], args[source.index], &plan.values[i]) < 0) {
                    if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                        return nullptr;
                    PyErr_Clear();  /* a value the kernel cannot take: the Python path names it */
                    Py_RETURN_NONE;
                }
                break;
        }
    }
    if (explained != nullptr) {
        plan.varying = 0;  /* as prepare() lays out a plan whose values are all fixed */
        *explained = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(&plan), sizeof plan);
        if (*explained == nullptr)
            return nullptr;
    } else if (launch(plan, reinterpret_cast<void *>(stream), maps) < 0) {
        return nullptr;
    } else {
        self->hits++;
    }
    PyObject *result = wrap_outputs(*entry, outputs);
    if (result == nullptr || !grad)
        return result;
    return attach(self->formula, args, count, result);
}

/* table(*args): serve(), launching. Keywords are the Python path's to read. */
PyObject *Table_call(Table *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)
        Py_RETURN_NONE;
    return serve(self, args, PyVectorcall_NARGS(nargsf), nullptr);
}

/* explain(*args) -> (result, plan) or None: what table(*args) would launch, launching nothing. */
PyObject *Table_explain(Table *self, PyObject *const *args, Py_ssize_t count) {
    PyObject *plan = nullptr;
    PyObject *result = serve(self, args, count, &plan);
    if (result == nullptr || result == Py_None) {
        Py_XDECREF(plan);
        return result;
    }
    if (plan == nullptr) {
        Py_DECREF(result);
        return nullptr;
    }
    return Py_BuildValue("NN", result, plan);
}

/* How many bytes `t` spans from its first element to the end of its last (none: 0). */
int64_t bytes_spanned(const at::Tensor &t) {
    if (t.numel() == 0)
        return 0;
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); d++)
        last += (t.size(d) - 1) * t.stride(d);
    return (last + 1) * static_cast<int64_t>(t.element_size());
}

/* Where `value`, a varying launch parameter, comes from: one of the call's arguments or outputs
   (the very object, or a view that starts where it does and ends within it), a tensor held for
   the launch, or a null pointer. False where none. */
bool find_source(PyObject *value, PyObject *const *given, Py_ssize_t count, const std::vector<PyObject *> &outputs,
                 Entry &entry, Source *source) {
    for (Py_ssize_t k = 0; k < count; k++)
        if (given[k] == value) {
            *source = {Source::ARGUMENT, static_cast<int>(k)};
            return true;
        }
    for (size_t k = 0; k < outputs.size(); k++)
        if (outputs[k] == value) {
            *source = {Source::OUTPUT, static_cast<int>(k)};
            return true;
        }
    if (value == Py_None) {
        *source = {Source::NULL_POINTER, 0};  /* a pointer the kernel never reads */
        return true;
    }
    /* A view of an argument or an output that starts where it does (an input expanded to the
       broadcast shape, a batched output described [matrices, rows, cols]): its pointer is the
       tensor's; the strides it was read through are the launch's fixed tail (or its tensor map's
       fixed shape), which a call with this signature always computes alike. */
    if (plain_tensor(value)) {
        const at::Tensor &view = THPVariable_Unpack(value);
        auto starts = [&view](PyObject *tensor) {
            if (!plain_tensor(tensor))
                return false;
            const at::Tensor &whole = THPVariable_Unpack(tensor);
            /* ... and ends within it: a call's fresh output is only as large as the learned one. */
            return whole.numel() > 0 && view.data_ptr() == whole.data_ptr() && view.is_alias_of(whole) &&
                   bytes_spanned(view) <= bytes_spanned(whole);
        };
        for (Py_ssize_t k = 0; k < count; k++)
            if (starts(given[k])) {
                *source = {Source::ARGUMENT, static_cast<int>(k)};
                return true;
            }
        for (size_t k = 0; k < outputs.size(); k++)
            if (starts(outputs[k])) {
                *source = {Source::OUTPUT, static_cast<int>(k)};
                return true;
            }
    }
    if (plain_tensor(value)) {
        entry.held.push_back(THPVariable_Unpack(value));
        *source = {Source::HELD, static_cast<int>(entry.held.size() - 1)};
        return true;
    }
    return false;
}

/* Unsigned ints from a tuple of `count` of them into `into`, in reverse order where `reverse`
   (a tensor map lists the innermost dimension first). False where it is not that. */
template <typename T>
bool read_dims(PyObject *tuple, Py_ssize_t count, bool reverse, T *into) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != count)
        return false;
    for (Py_ssize_t k = 0; k < count; k++) {
        unsigned long long x = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tuple, k));
        if (PyErr_Occurred() || static_cast<unsigned long long>(static_cast<T>(x)) != x) {
            PyErr_Clear();
            return false;
        }
        into[reverse ? count - 1 - k : k] = static_cast<T>(x);
    }
    return true;
}

/* A varying parameter the Python side packed in a tuple: `(value,)`, a value the signature fixes
   (a descriptor's shape and strides), or for a tensor map (code D) how to encode it:
   `(tensor, data_type, shape, strides, box, swizzle, fill)`, shape, box and the strides in
   elements as torch lists them (outermost first, the innermost stride, 1, left out). Its value
   goes into `slot`, or its encoding into the entry. False where it is not one of those. */
bool learn_packed(PyObject *value, char code, PyObject *const *given, Py_ssize_t count,
                  const std::vector<PyObject *> &outputs, Entry &entry, uint64_t *slot, Source *source) {
    if (code != 'D') {
        if (PyTuple_GET_SIZE(value) != 1 || code == 'p')
            return false;
        if (convert(code, PyTuple_GET_ITEM(value, 0), slot) < 0) {
            PyErr_Clear();
            return false;
        }
        *source = {Source::FIXED, 0};
        return true;
    }
    if (cuLaunchKernel_ != nullptr && cuTensorMapEncodeTiled_ == nullptr)
        return false;  /* a driver without tensor maps: Triton's launch serves these calls */
    PyObject *tensor, *shape, *strides, *box;
    TensorMapSpec spec;
    memset(&spec, 0, sizeof spec);
    if (PyTuple_GET_SIZE(value) != 7 || entry.maps.size() >= MAX_MAPS ||
        !PyArg_ParseTuple(value, "OiOOOii", &tensor, &spec.data_type, &shape, &strides, &box, &spec.swizzle,
                          &spec.fill)) {
        PyErr_Clear();
        return false;
    }
    Py_ssize_t rank = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : 0;
    if (rank < 1 || rank > 5 || !plain_tensor(tensor) ||
        !find_source(tensor, given, count, outputs, entry, &spec.base) ||
        (spec.base.kind != Source::ARGUMENT && spec.base.kind != Source::OUTPUT) ||
        !read_dims(shape, rank, true, spec.dims) || !read_dims(strides, rank - 1, true, spec.strides) ||
        !read_dims(box, rank, true, spec.box))
        return false;
    size_t element_size = THPVariable_Unpack(tensor).element_size();
    for (Py_ssize_t k = 0; k + 1 < rank; k++)
        spec.strides[k] *= element_size;
    spec.rank = static_cast<uint32_t>(rank);
    entry.maps.push_back(spec);
    *source = {Source::TENSOR_MAP, static_cast<int>(entry.maps.size() - 1)};
    return true;
}

/* learn(args, launch_args, plan, skip, result, stream) -> bool: remember what a call with `args`
   did, the Python path having served it: it launched `plan` (bytes from prepare()) with
   `launch_args` (the first `skip` of them not taken by the binary) on `stream` and returned
   `result`, a fresh contiguous tensor or a tuple of them. False where anything is not as this
   path can repeat it. */
PyObject *Table_learn(Table *self, PyObject *args) {
    PyObject *call_args, *launch_args, *plan_bytes, *result;
    int skip;
    unsigned long long stream;
    if (!PyArg_ParseTuple(args, "O!O!O!iOK:learn", &PyTuple_Type, &call_args, &PyTuple_Type, &launch_args,
                          &PyBytes_Type, &plan_bytes, &skip, &result, &stream))
        return nullptr;
    if (PyBytes_GET_SIZE(plan_bytes) != static_cast<Py_ssize_t>(sizeof(Plan))) {
        PyErr_SetString(PyExc_TypeError, "learn() takes a plan from prepare()");
        return nullptr;
    }
    auto learned = std::make_shared<Entry>();
    Entry &entry = *learned;
    memcpy(&entry.plan, PyBytes_AS_STRING(plan_bytes), sizeof(Plan));
    entry.stream = static_cast<uintptr_t>(stream);
    Py_ssize_t count = PyTuple_GET_SIZE(call_args);
    PyObject *const *given = &PyTuple_GET_ITEM(call_args, 0);
    std::string key;
    try {
        if (!append_key(key, given, count, nullptr))
            Py_RETURN_FALSE;
    } catch (...) {
        Py_RETURN_FALSE;
    }
    std::vector<PyObject *> outputs;
    entry.tuple_result = PyTuple_Check(result);
    if (entry.tuple_result) {
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(result); j++)
            outputs.push_back(PyTuple_GET_ITEM(result, j));
    } else {
        outputs.push_back(result);
    }
    if (outputs.empty() || outputs.size() > MAX_OUTPUTS)
        Py_RETURN_FALSE;
    for (PyObject *output : outputs) {
        if (!plain_tensor(output))
            Py_RETURN_FALSE;
        for (Py_ssize_t i = 0; i < count; i++)
            if (given[i] == output)  /* an input handed back: not a fresh output */
                Py_RETURN_FALSE;
        const at::Tensor &t = THPVariable_Unpack(output);
        if (!t.is_contiguous() || t.layout() != at::kStrided || t.requires_grad() ||
            t.device() != THPVariable_Unpack(outputs[0]).device())
            Py_RETURN_FALSE;
        entry.output_sizes.push_back(t.sizes().vec());
        entry.output_dtypes.push_back(t.scalar_type());
        entry.device = t.device();
    }
    Py_ssize_t varying = PyTuple_GET_SIZE(launch_args) - skip;
    if (skip < 0 || varying != entry.plan.varying)
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < varying; i++) {
        PyObject *value = PyTuple_GET_ITEM(launch_args, skip + i);
        char code = entry.plan.codes[i];
        Source source;
        if (PyTuple_Check(value)) {
            if (!learn_packed(value, code, given, count, outputs, entry, &entry.plan.values[i], &source))
                Py_RETURN_FALSE;
        } else {
            if (code == 'D' || !find_source(value, given, count, outputs, entry, &source))
                Py_RETURN_FALSE;
            /* Pointers come from tensors (or None); any other code converts a scalar. */
            bool pointer = source.kind != Source::ARGUMENT || plain_tensor(value);
            if ((code == 'p') != pointer)
                Py_RETURN_FALSE;
        }
        entry.sources.push_back(source);
    }
    if (self->entries->size() >= MAX_ENTRIES)
        self->entries->clear();
    (*self->entries)[key] = std::move(learned);
    Py_RETURN_TRUE;
}

PyObject *Table_forget(Table *self, PyObject *) {
    self->entries->clear();
    Py_RETURN_NONE;
}

PyObject *Table_size(Table *self, PyObject *) {
    return PyLong_FromSize_t(self->entries->size());
}

PyMethodDef Table_methods[] = {
    {"learn", reinterpret_cast<PyCFunction>(Table_learn), METH_VARARGS,
     "learn(args, launch_args, plan, skip, result, stream) -> whether calls like this one are served here from now on"},
    {"explain", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Table_explain)), METH_FASTCALL,
     "explain(*args) -> (result, plan) or None: what table(*args) would launch, launching nothing"},
    {"forget", reinterpret_cast<PyCFunction>(Table_forget), METH_NOARGS, "forget every learned call"},
    {"size", reinterpret_cast<PyCFunction>(Table_size), METH_NOARGS, "how many signatures are learned"},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef Table_members[] = {
    {"hits", T_ULONGLONG, offsetof(Table, hits), READONLY, "calls served here"},
    {"formula", T_OBJECT, offsetof(Table, formula), 0,
     "the op's autograd node maker (a Formula) or None: with one, calls that record autograd are served too"},
    {nullptr, 0, 0, 0, nullptr},
};

PyObject *driver_ready(PyObject *, PyObject *) {
    if (cuLaunchKernel_ != nullptr)
        Py_RETURN_NONE;
    return PyUnicode_FromString(driver_error);
}

PyMethodDef module_methods[] = {
    {"prepare", prepare, METH_VARARGS,
     "prepare(function, grid_x, grid_y, grid_z, threads, shared, device, codes, varying, tail) -> plan"},
    {"describe", describe, METH_O, "describe(plan) -> what the plan holds"},
    {"driver_ready", driver_ready, METH_NOARGS, "None when libcuda is open, else why it is not"},
    {nullptr, nullptr, 0, nullptr},
};

/* The type's fields are set one by one in PyInit (C++ has no designated initializers for it). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
PyTypeObject TableType = {PyVarObject_HEAD_INIT(nullptr, 0)};
#pragma GCC diagnostic pop

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tilegen_callpath", nullptr, -1, module_methods,
                          nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__tilegen_callpath(void) {
    data_ptr_name = PyUnicode_InternFromString("data_ptr");
    enter_name = PyUnicode_InternFromString("launch_enter_hook");
    exit_name = PyUnicode_InternFromString("launch_exit_hook");
    calls_name = PyUnicode_InternFromString("calls");
    usable_name = PyUnicode_InternFromString("usable");
    PyObject *parameters = PyImport_ImportModule("torch.nn.parameter");
    if (parameters == nullptr)
        return nullptr;
    parameter_type = reinterpret_cast<PyTypeObject *>(PyObject_GetAttrString(parameters, "Parameter"));
    Py_DECREF(parameters);
    if (parameter_type == nullptr || !PyType_Check(reinterpret_cast<PyObject *>(parameter_type)))
        return nullptr;
    attach_name = PyUnicode_InternFromString("attach");
    if (data_ptr_name == nullptr || enter_name == nullptr || exit_name == nullptr || calls_name == nullptr ||
        usable_name == nullptr || attach_name == nullptr)
        return nullptr;
    TableType.tp_name = "_tilegen_callpath.Table";
    TableType.tp_basicsize = sizeof(Table);
    TableType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
    TableType.tp_doc = "Table(current_device, stream_of, hooks): one op's learned calls; table(*args) serves one";
    TableType.tp_new = Table_new;
    TableType.tp_call = PyVectorcall_Call;
    TableType.tp_vectorcall_offset = offsetof(Table, vectorcall);
    TableType.tp_traverse = reinterpret_cast<traverseproc>(Table_traverse);
    TableType.tp_clear = reinterpret_cast<inquiry>(Table_clear);
    TableType.tp_dealloc = reinterpret_cast<destructor>(Table_dealloc);
    TableType.tp_methods = Table_methods;
    TableType.tp_members = Table_members;
    if (PyType_Ready(&TableType) < 0)
        return nullptr;
    open_driver();
    PyObject *created = PyModule_Create(&module_def);
    if (created == nullptr)
        return nullptr;
    Py_INCREF(&TableType);
    if (PyModule_AddObject(created, "Table", reinterpret_cast<PyObject *>(&TableType)) < 0) {
        Py_DECREF(&TableType);
        Py_DECREF(created);
        return nullptr;
    }
    return created;
}
