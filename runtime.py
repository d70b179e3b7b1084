"""Python binding of the aotpack C++ runtime (libaotpack.so), through ctypes and numpy only.

    model = Model("mlp.aotpack")
    session = model.session(num_threads=4)
    (y,) = session.run({"x": x})

numpy has no bfloat16: a bfloat16 input may be given as a uint16 array of the raw bits (or an ml_dtypes
bfloat16 array), and bfloat16 outputs come back as uint16 arrays of the raw bits.

Tensors already on a GPU skip the copies through host memory with a device-I/O session (torch is then
needed only to make the inputs; this module imports it only in DeviceTensor.to_torch):

    session = model.session(device="cuda", io="device")
    outputs = session.run([x_cuda])                 # torch CUDA tensors, read in place
    y = outputs[0].to_torch()                       # or torch.as_tensor(outputs[0]): no copy, see DeviceTensor

CUDA sessions record a CUDA graph at each new shape and replay it after (cuda_graphs=False turns that off;
cuda_graph_cache_size bounds the graphs kept), launch the kernels of an sm_90+ package with programmatic
dependent launch on an sm_90+ GPU (cuda_pdl=False turns that off), and `Model(path, prepare="cuda")` sets the
GPU up while the load checks the digests.
"""

from __future__ import annotations

import ctypes
import enum
import json
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import errors, knobs, runtime_files
from .lowering.ir.dtypes import DTYPES, code

MAX_RANK = 8


class StatusCode(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_RANGE = 2
    NOT_FOUND = 3
    UNSUPPORTED = 4
    DATA_LOSS = 5
    RESOURCE_EXHAUSTED = 6
    INTERNAL = 7


class AotpackError(errors.AotpackError, RuntimeError):
    """A failure reported by the runtime; `code` is a StatusCode and the message says what and where."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        try:
            self.code: StatusCode | int = StatusCode(code)
        except ValueError:
            self.code = code
        self.message = message


# ---- the C API's types (aotpack.h) ---------------------------------------------------------------------


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
    ]


class _DimInfo(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_int64),
        ("symbol", ctypes.c_char_p),
        ("min", ctypes.c_int64),
        ("max", ctypes.c_int64),
    ]


class _TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("dims", _DimInfo * MAX_RANK),
    ]


class _ModelOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("verify_digests", ctypes.c_int32),
        ("prepare_device_type", ctypes.c_int32),
        ("prepare_device_index", ctypes.c_int32),
        ("public_key_path", ctypes.c_char_p),
        ("public_key_pem", ctypes.c_char_p),
        ("signature_path", ctypes.c_char_p),
    ]


class _SessionOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("device_type", ctypes.c_int),
        ("device_index", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("io_memory", ctypes.c_int),
        ("cuda_graphs", ctypes.c_int32),
        ("cuda_graph_cache_size", ctypes.c_int32),
        ("cuda_pdl", ctypes.c_int32),
    ]


# aotpack_dtype_t values, with the numpy dtype of each ("bfloat16" where numpy has none).
_DTYPES: dict[int, Any] = {code(name): name if name == "bfloat16" else np.dtype(name) for name in DTYPES}
_BFLOAT16 = code("bfloat16")
_CODE_OF_NUMPY = {dt: code for code, dt in _DTYPES.items() if code != _BFLOAT16}
# By name ("float32", ..., "bfloat16", "bool"), which is how torch spells dtypes after "torch.".
_CODE_OF_NAME = {dt if isinstance(dt, str) else dt.name: code for code, dt in _DTYPES.items()}
# aotpack_memory_t values.
_MEMORY = {"host": 0, "device": 1}

_Status = ctypes.c_void_p
_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def _candidates() -> list[Path]:
    explicit = knobs.runtime_lib()
    if explicit:  # an explicit choice (a sanitizer build, the tests' own build) beats any installed copy
        return [Path(explicit)]
    return runtime_files.library_candidates()


def library_path() -> Path:
    """The libaotpack this binding loads: $AOTPACK_RUNTIME_LIB, else the one installed in the package (a
    wheel), else <sys.prefix>/lib, else the source checkout's build/runtime (runtime_files.py)."""
    candidates = _candidates()
    for path in candidates:
        if path.is_file():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise AotpackError(
        StatusCode.NOT_FOUND,
        f"cannot find the aotpack runtime library {runtime_files.LIBRARY_NAME} (looked at {looked}); install "
        "aotpack with `pip install .` (a wheel with the runtime), or in a source checkout build it with "
        "`cmake -S runtime_cpp -B build/runtime && cmake --build build/runtime`; or set AOTPACK_RUNTIME_LIB to "
        "its path",
    )


def version() -> str:
    """The loaded library's version (aotpack_version()), "MAJOR.MINOR.PATCH"."""
    return lib().aotpack_version().decode()


def _declare(lib: ctypes.CDLL) -> None:
    P = ctypes.POINTER
    sigs = {
        "aotpack_version": (ctypes.c_char_p, []),
        "aotpack_status_code": (ctypes.c_int, [_Status]),
        "aotpack_status_message": (ctypes.c_char_p, [_Status]),
        "aotpack_status_free": (None, [_Status]),
        "aotpack_model_options_init": (None, [P(_ModelOptions)]),
        "aotpack_model_load": (_Status, [ctypes.c_char_p, P(_ModelOptions), P(ctypes.c_void_p)]),
        "aotpack_model_release": (None, [ctypes.c_void_p]),
        "aotpack_model_num_inputs": (ctypes.c_size_t, [ctypes.c_void_p]),
        "aotpack_model_num_outputs": (ctypes.c_size_t, [ctypes.c_void_p]),
        "aotpack_model_input_info": (_Status, [ctypes.c_void_p, ctypes.c_size_t, P(_TensorInfo)]),
        "aotpack_model_output_info": (_Status, [ctypes.c_void_p, ctypes.c_size_t, P(_TensorInfo)]),
        "aotpack_model_manifest": (ctypes.c_char_p, [ctypes.c_void_p]),
        "aotpack_model_digest": (ctypes.c_char_p, [ctypes.c_void_p]),
        "aotpack_model_weights_digest": (ctypes.c_char_p, [ctypes.c_void_p]),
        "aotpack_model_refit": (_Status, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, P(ctypes.c_void_p)]),
        "aotpack_session_options_init": (None, [P(_SessionOptions)]),
        "aotpack_session_create": (_Status, [ctypes.c_void_p, P(_SessionOptions), P(ctypes.c_void_p)]),
        "aotpack_session_destroy": (None, [ctypes.c_void_p]),
        "aotpack_session_io_memory": (ctypes.c_int, [ctypes.c_void_p]),
        "aotpack_session_run": (_Status, [ctypes.c_void_p, P(_Tensor), ctypes.c_size_t]),
        "aotpack_session_output": (_Status, [ctypes.c_void_p, ctypes.c_size_t, P(_Tensor)]),
    }
    # Newer than the calls above: a library from before them (AOTPACK_RUNTIME_LIB naming an older build, as
    # scripts/runtime_ab.py does) still loads, and Session.enqueue says what it lacks.
    optional = {
        "aotpack_session_enqueue": (_Status, [ctypes.c_void_p, P(_Tensor), ctypes.c_size_t, ctypes.c_void_p]),
        "aotpack_session_synchronize": (_Status, [ctypes.c_void_p]),
        "aotpack_session_run_after": (_Status, [ctypes.c_void_p, P(_Tensor), ctypes.c_size_t, ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in {**sigs, **optional}.items():
        if name in optional and not hasattr(lib, name):
            continue
        fn = getattr(lib, name)  # a required call the library lacks: AttributeError names it
        fn.restype = restype
        fn.argtypes = argtypes


def lib() -> ctypes.CDLL:
    """The loaded runtime library (loaded on first use, so importing this module never fails)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            try:
                loaded = ctypes.CDLL(str(path))
            except OSError as e:
                raise AotpackError(
                    StatusCode.NOT_FOUND, f"cannot load the aotpack runtime library {path}: {e}"
                ) from e
            _declare(loaded)
            _lib = loaded
        return _lib


def _check(status: int | None) -> None:
    if not status:
        return
    L = lib()
    code = L.aotpack_status_code(status)
    message = L.aotpack_status_message(status).decode("utf-8", "replace")
    L.aotpack_status_free(status)
    raise AotpackError(code, message)


# ---- the signature ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dim:
    """A fixed size (`size`), a symbol (`symbol` with its range), or an expression (all None)."""

    size: int | None
    symbol: str | None = None
    min: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: Any  # a numpy dtype, or the string "bfloat16"
    dims: tuple[Dim, ...]

    @property
    def shape(self) -> tuple[int | str | None, ...]:
        """Each dim as its size, its symbol's name, or None for an expression."""
        return tuple(d.size if d.size is not None else d.symbol for d in self.dims)


def _tensor_info(info: _TensorInfo) -> TensorInfo:
    dims = []
    for d in info.dims[: info.rank]:
        if d.size >= 0:
            dims.append(Dim(d.size, None, d.size, d.size))
        elif d.symbol:
            dims.append(Dim(None, d.symbol.decode(), d.min, d.max))
        else:
            dims.append(Dim(None))
    return TensorInfo(info.name.decode(), _DTYPES.get(info.dtype, f"unknown({info.dtype})"), tuple(dims))


# ---- model and session ---------------------------------------------------------------------------------


def _device(device: str) -> tuple[int, int]:
    """("cpu" | "cuda" | "cuda:N") as (aotpack_device_type_t, index)."""
    kind, _, index = device.partition(":")
    device_type = {"cpu": 0, "cuda": 1}.get(kind, -1)
    if device_type < 0 or (index and not index.isdigit()):
        raise AotpackError(StatusCode.INVALID_ARGUMENT, f"unknown device {device!r}; expected 'cpu', 'cuda' or 'cuda:N'")
    return device_type, int(index or 0)


class Model:
    """A loaded package. Immutable: share it across threads; give each thread its own Session."""

    def __init__(self, path: str | os.PathLike[str], verify_digests: bool = True, prepare: str | None = None, *,
                 public_key: str | os.PathLike[str] | bytes | None = None,
                 signature: str | os.PathLike[str] | None = None):
        """prepare: "cuda" or "cuda:N" sets the model up on that GPU (context, kernels, weights) while the load
        checks the digests, instead of at its first session there; a failure there is the session's to report.
        public_key: a trusted PEM public key (a path, or the PEM itself as bytes); the package must then
        carry a signature by it (`aotpack sign --key`), in `signature` (default: "<path>.sig"), checked
        before anything of the package is used (docs/registries.md)."""
        self._lib = lib()
        self._handle = ctypes.c_void_p()
        options = _ModelOptions()
        self._lib.aotpack_model_options_init(ctypes.byref(options))
        options.verify_digests = 1 if verify_digests else 0
        if prepare is not None:
            options.prepare_device_type, options.prepare_device_index = _device(prepare)
        if isinstance(public_key, (bytes, bytearray)):
            if b"\0" in public_key:
                raise AotpackError(StatusCode.INVALID_ARGUMENT, "public_key (PEM bytes) contains a NUL byte")
            options.public_key_pem = bytes(public_key)
        elif public_key is not None:
            options.public_key_path = os.fsencode(public_key)
        if signature is not None:
            options.signature_path = os.fsencode(signature)
        _check(
            self._lib.aotpack_model_load(os.fsencode(path), ctypes.byref(options), ctypes.byref(self._handle))
        )
        self._describe(Path(path))

    def _describe(self, path: Path) -> None:
        self.path = path
        self.inputs = self._infos(self._lib.aotpack_model_num_inputs, self._lib.aotpack_model_input_info)
        self.outputs = self._infos(self._lib.aotpack_model_num_outputs, self._lib.aotpack_model_output_info)
        self.manifest: dict[str, Any] = json.loads(self._lib.aotpack_model_manifest(self._handle).decode())
        # The package digest, "sha256:<hex>" of manifest.json as stored (what `aotpack inspect` prints).
        self.digest: str = self._lib.aotpack_model_digest(self._handle).decode()
        # "sha256:<hex>" of the weights it runs: the package's weights.safetensors, or a refit's bytes.
        self.weights_digest: str = self._lib.aotpack_model_weights_digest(self._handle).decode()

    def refit(self, weights: bytes | str | os.PathLike[str]) -> Model:
        """A new Model running this one's kernels and plan (shared, not reloaded) with other weights: the
        safetensors bytes, or a file, holding the package's own tensors (as `aotpack refit` writes its
        weights.safetensors: the same names, dtypes and shapes, export's `*.panels16` layouts included).
        This model and its sessions keep their weights; sessions made from the new model run the new ones
        (aotpack_model_refit: a run never sees a mix). CPU sessions only for now."""
        data = weights if isinstance(weights, (bytes, bytearray, memoryview)) else Path(weights).read_bytes()
        data = bytes(data)
        handle = ctypes.c_void_p()
        _check(self._lib.aotpack_model_refit(self._handle, data, len(data), ctypes.byref(handle)))
        model = Model.__new__(Model)
        model._lib = self._lib
        model._handle = handle
        model._describe(self.path)
        return model

    def _infos(self, count_fn, info_fn) -> list[TensorInfo]:
        infos = []
        for i in range(count_fn(self._handle)):
            info = _TensorInfo()
            _check(info_fn(self._handle, i, ctypes.byref(info)))
            infos.append(_tensor_info(info))
        return infos

    def session(self, num_threads: int = 1, device: str = "cpu", io: str = "host", cuda_graphs: bool = True,
                cuda_graph_cache_size: int = 64, cuda_pdl: bool = True) -> Session:
        """device: "cpu", "cuda" or "cuda:N". io: "host" (run() takes and returns numpy arrays, on every
        device) or "device" (on CUDA, run() takes CUDA tensors and returns DeviceTensors; on the CPU, whose
        device memory is host memory, it is the same as "host"). cuda_graphs: on CUDA, the first run at each
        shape records a CUDA graph and later runs at that shape replay it (False launches every kernel each
        run); the session keeps its cuda_graph_cache_size most recently used graphs (one a shape; with io="device",
        two where the input tensors move between runs). cuda_pdl:
        on an sm_90+ GPU whose driver has cuLaunchKernelEx, the kernels the package marks "pdl" (an sm_90+
        package's) are launched with programmatic dependent launch, each free to start while its predecessor
        finishes (False launches every kernel with cuLaunchKernel); the outputs are the same either way."""
        return Session(self, num_threads=num_threads, device=device, io=io, cuda_graphs=cuda_graphs,
                       cuda_graph_cache_size=cuda_graph_cache_size, cuda_pdl=cuda_pdl)

    def close(self) -> None:
        """Drops this object's reference to the model; sessions made from it keep it alive until they close."""
        if getattr(self, "_handle", None) and self._handle.value:
            self._lib.aotpack_model_release(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self) -> None:
        # Sessions keep a reference to their model, so this runs only once they are gone.
        self.close()

    def __repr__(self) -> str:
        return f"Model({str(self.path)!r}, inputs={[i.name for i in self.inputs]}, outputs={[o.name for o in self.outputs]})"


@dataclass(frozen=True)
class DeviceTensor:
    """An output of a device-I/O CUDA session: `data` is a device pointer into the session's output memory,
    valid until the session's next run (the DeviceTensor keeps its session, and so that memory, alive). Exposes `__cuda_array_interface__`, so torch.as_tensor(t) (or
    cupy.asarray(t)) wraps it without a copy; bfloat16 data is shown there as uint16 bits."""

    name: str
    data: int
    shape: tuple[int, ...]
    dtype: Any  # a numpy dtype, or the string "bfloat16"
    device: int  # the CUDA device ordinal
    owner: Any = field(default=None, repr=False, compare=False)  # the Session whose memory `data` is
    # The CUstream handle of the stream whose work writes `data` (Session.enqueue), or None: complete already.
    stream: int | None = None

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        typestr = np.dtype(np.uint16).str if isinstance(self.dtype, str) else self.dtype.str
        # A run()'s outputs are complete when it returns, so consumers need not wait on a stream; an enqueue()'s
        # on its stream (the interface writes the legacy default stream, handle 0, as 1).
        stream = None if self.stream is None else (self.stream or 1)
        return {"shape": self.shape, "typestr": typestr, "data": (self.data, False), "version": 3, "strides": None,
                "stream": stream}

    def to_torch(self) -> Any:
        """A torch tensor on the same device holding a copy, which outlives the next run. The copy is made on
        torch's current stream, which Session.run() waits for before it overwrites the outputs, after the stream
        of an enqueue()'s run (on the device: this does not wait)."""
        import torch

        if self.stream is not None:
            current = torch.cuda.current_stream(self.device)
            if current.cuda_stream != self.stream:
                writer = (torch.cuda.ExternalStream(self.stream, device=f"cuda:{self.device}") if self.stream
                          else torch.cuda.default_stream(self.device))
                current.wait_stream(writer)
        copy = torch.as_tensor(self, device=f"cuda:{self.device}").clone()
        return copy.view(torch.bfloat16) if isinstance(self.dtype, str) else copy


class _SessionArray(np.ndarray):
    """A numpy view of a session's output memory that keeps the session (and so the memory) alive."""

    def __new__(cls, view: np.ndarray, session: Any) -> _SessionArray:  # noqa: PYI034
        array = view.view(cls)
        array._session = session
        return array

    def __array_finalize__(self, obj: Any) -> None:
        self._session = getattr(obj, "_session", None)


# The runtime's words for a second thread's run (aotpack_session::in_use_error), which a device-I/O run says
# itself: it must not refill the session's argument structs while the first thread's run reads them.
_IN_USE = ("aotpack_session_run was called while another thread is using this session: a session serves one thread "
           "at a time; create one session per thread (sessions of one model share its weights and kernels)")

_DEVICE_DTYPE_CODES: dict[Any, int] = {}


def _device_dtype_code(dtype: Any) -> int | None:
    """The aotpack dtype code of a CUDA tensor's dtype (torch.float32 -> float32's), by its name; cached."""
    code = _DEVICE_DTYPE_CODES.get(dtype)
    if code is None:
        code = _CODE_OF_NAME.get(str(dtype).rpartition(".")[2])
        if code is not None:
            _DEVICE_DTYPE_CODES[dtype] = code
    return code


class _DeviceArgs:
    """aotpack_session_run's input structs for `count` device tensors, each with its shape array."""

    def __init__(self, count: int):
        self.count = count
        self.shapes = [(ctypes.c_int64 * MAX_RANK)() for _ in range(count)]
        self.tensors = (_Tensor * max(count, 1))()
        for tensor, shape in zip(self.tensors, self.shapes):
            tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))


class Session:
    """Scratch memory and threads for running a model. One thread at a time: run() from a second thread while
    the first is inside it raises AotpackError (INVALID_ARGUMENT) rather than running (the runtime checks)."""

    def __init__(self, model: Model, num_threads: int = 1, device: str = "cpu", io: str = "host",
                 cuda_graphs: bool = True, cuda_graph_cache_size: int = 64, cuda_pdl: bool = True):
        self._model = model  # keeps the model alive while the session lives
        self._lib = model._lib
        self._handle = ctypes.c_void_p()
        options = _SessionOptions()
        self._lib.aotpack_session_options_init(ctypes.byref(options))
        options.num_threads = num_threads
        options.device_type, options.device_index = _device(device)
        if io not in _MEMORY:
            raise AotpackError(StatusCode.INVALID_ARGUMENT, f"unknown io {io!r}; expected 'host' or 'device'")
        options.io_memory = _MEMORY[io]
        options.cuda_graphs = 1 if cuda_graphs else 0
        options.cuda_graph_cache_size = cuda_graph_cache_size
        options.cuda_pdl = 1 if cuda_pdl else 0
        if not model._handle.value:
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               "the model is closed (Model.close()); sessions made before it keep working, "
                               "but a new one needs the model loaded again")
        _check(
            self._lib.aotpack_session_create(model._handle, ctypes.byref(options), ctypes.byref(self._handle))
        )
        self._device_index = options.device_index
        self._io = "device" if self._lib.aotpack_session_io_memory(self._handle) == _MEMORY["device"] else "host"
        # A device-I/O run fills these argument structs instead of making new ones: with CUDA graphs a small
        # model's run is tens of microseconds, of which making them took 5-10 (docs/performance.md, session 28).
        # The lock keeps a second thread from refilling them while the first is inside the runtime.
        self._device_args = _DeviceArgs(len(model.inputs))
        self._output = _Tensor()
        self._last_outputs: list[DeviceTensor | None] = [None] * len(model.outputs)
        self._run_lock = threading.Lock()

    @property
    def io(self) -> str:
        """Where run() takes inputs and returns outputs: "host" or "device" (only ever "host" on the CPU)."""
        return self._io  # fixed at creation; asked of the runtime once, not on every run

    def _ordered(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list:
        if isinstance(inputs, np.ndarray) or hasattr(inputs, "data_ptr"):
            raise AotpackError(
                StatusCode.INVALID_ARGUMENT,
                "inputs must be a list or a dict of arrays, not one array: pass [x]",
            )
        if not isinstance(inputs, Mapping):
            return list(inputs)
        names = [i.name for i in self._model.inputs]
        missing = [n for n in names if n not in inputs]
        extra = [k for k in inputs if k not in names]
        if missing:
            raise AotpackError(
                StatusCode.INVALID_ARGUMENT,
                f'input "{missing[0]}" is missing (the model takes {", ".join(names)})',
            )
        if extra:
            raise AotpackError(
                StatusCode.INVALID_ARGUMENT,
                f"the model takes no input named {', '.join(map(repr, extra))} (its inputs: {', '.join(names)})",
            )
        return [inputs[n] for n in names]

    def _tensor(self, index: int, value: Any, keep: list) -> _Tensor:
        if index >= len(self._model.inputs):  # one too many: left empty for the runtime to refuse the count
            return _Tensor()
        array = np.asarray(value, order="C")  # not ascontiguousarray, which turns a 0-d array into 1-d
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        expected = self._model.inputs[index].dtype if index < len(self._model.inputs) else None
        if array.dtype.name == "bfloat16" or (
            isinstance(expected, str) and expected == "bfloat16" and array.dtype == np.uint16
        ):
            code = _BFLOAT16  # raw bfloat16 bits (ml_dtypes' bfloat16, or uint16)
        elif array.dtype in _CODE_OF_NUMPY:
            code = _CODE_OF_NUMPY[array.dtype]
        else:
            name = self._model.inputs[index].name if index < len(self._model.inputs) else str(index)
            raise AotpackError(
                StatusCode.INVALID_ARGUMENT, f'input "{name}": numpy dtype {array.dtype} has no aotpack dtype'
            )
        if array.ndim > MAX_RANK:
            raise AotpackError(
                StatusCode.INVALID_ARGUMENT, f"input {index}: rank {array.ndim} is more than {MAX_RANK}"
            )
        shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
        keep.append((array, shape))
        return _Tensor(code, array.ndim, shape, array.ctypes.data if array.size else None)

    def _fill_device_tensor(self, index: int, value: Any, tensor: _Tensor, shape: ctypes.Array) -> None:
        if index >= len(self._model.inputs):  # one too many: left empty for the runtime to refuse the count
            return

        def refuse(why: str) -> AotpackError:
            name = self._model.inputs[index].name if index < len(self._model.inputs) else str(index)
            return AotpackError(StatusCode.INVALID_ARGUMENT, f'input "{name}": {why}')

        if not hasattr(value, "data_ptr"):
            raise refuse(f"this session takes CUDA tensors (io='device'), not {type(value).__name__}")
        device = getattr(value, "device", None)
        if getattr(device, "type", "cuda") != "cuda":
            raise refuse(f"the tensor is on {device}; this session takes CUDA tensors (io='device')")
        if not value.is_contiguous():
            raise refuse("the tensor is not contiguous; pass tensor.contiguous()")
        code = _device_dtype_code(value.dtype)
        if code is None:
            raise refuse(f"dtype {value.dtype} has no aotpack dtype")
        dims = tuple(map(int, value.shape))
        if len(dims) > MAX_RANK:
            raise refuse(f"rank {len(dims)} is more than {MAX_RANK}")
        shape[: len(dims)] = dims
        tensor.dtype, tensor.rank, tensor.data = code, len(dims), value.data_ptr() or None

    def _torch_stream(self) -> int | None:
        """torch's current CUDA stream on the session's device, as a CUstream handle; None where torch has not
        initialised CUDA in this process (then no work of torch's can be writing the inputs)."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return None
        # The raw handle, as Triton's launcher reads it: torch.cuda.current_stream() makes a new Stream object at
        # every call, 7.5 us of a small model's 45 us run on a slow H200 host (session 30).
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw(self._device_index) if raw else torch.cuda.current_stream(self._device_index).cuda_stream

    def run(self, inputs: Sequence[Any] | Mapping[str, Any], copy: bool = True) -> list[np.ndarray] | list[DeviceTensor]:
        """Runs the model; inputs in signature order or by name. A host-I/O session takes arrays and returns
        copies of the outputs as numpy arrays (copy=False: read-only arrays over the session's own output
        memory, no copy, valid until the next run); a device-I/O session takes CUDA tensors (contiguous, with
        data_ptr(), dtype and shape, like torch's) and returns DeviceTensors, valid until the next run."""
        if not self._handle.value:
            raise AotpackError(StatusCode.INVALID_ARGUMENT, "the session is closed (Session.close()); make a new one")
        ordered = self._ordered(inputs)
        if self.io == "device":
            return self._run_device(ordered)
        keep: list = []
        tensors = (_Tensor * max(len(ordered), 1))(*[self._tensor(i, v, keep) for i, v in enumerate(ordered)])
        _check(self._lib.aotpack_session_run(self._handle, tensors, len(ordered)))
        return self._host_outputs(copy)

    def _run_device(self, ordered: list, stream: int | None = None) -> list[DeviceTensor]:
        """A device-I/O run: on the session's own stream, waiting (stream None), or queued on `stream`."""
        if not self._run_lock.acquire(blocking=False):
            raise AotpackError(StatusCode.INVALID_ARGUMENT, _IN_USE)
        try:
            # another count than the model's (which the runtime refuses, naming it) gets structs of its own
            args = self._device_args if len(ordered) == self._device_args.count else _DeviceArgs(len(ordered))
            for i, value in enumerate(ordered):
                self._fill_device_tensor(i, value, args.tensors[i], args.shapes[i])
            if stream is None:
                # The run must start after the work on torch's current stream, which may be writing its inputs
                # (or copying the previous outputs, see DeviceTensor.to_torch): the session's stream waits for
                # that stream on the device. A runtime from before aotpack_session_run_after: the host waits.
                torch_stream = self._torch_stream()
                if torch_stream is None:
                    _check(self._lib.aotpack_session_run(self._handle, args.tensors, len(ordered)))
                elif hasattr(self._lib, "aotpack_session_run_after"):
                    _check(self._lib.aotpack_session_run_after(self._handle, args.tensors, len(ordered), torch_stream))
                else:
                    sys.modules["torch"].cuda.current_stream(self._device_index).synchronize()
                    _check(self._lib.aotpack_session_run(self._handle, args.tensors, len(ordered)))
            else:
                _check(self._lib.aotpack_session_enqueue(self._handle, args.tensors, len(ordered), stream))
            return self._device_outputs(stream)
        finally:
            self._run_lock.release()

    def enqueue(self, inputs: Sequence[Any] | Mapping[str, Any], stream: Any = None) -> list[DeviceTensor]:
        """Queues a run on a CUDA stream and returns without waiting (aotpack_session_enqueue; device I/O only).
        `stream`: a torch.cuda.Stream (or anything with `cuda_stream`), a CUstream handle as an int, or None for
        torch's current stream on the session's device. The run starts after the work already queued on that
        stream, so the inputs may still be being written there; the DeviceTensors it returns are written when the
        stream reaches the run's end, and the next run overwrites them (read them on that stream first). A check
        that fails in a kernel is raised by synchronize(), or by the next run()."""
        if not self._handle.value:
            raise AotpackError(StatusCode.INVALID_ARGUMENT, "the session is closed (Session.close()); make a new one")
        if not hasattr(self._lib, "aotpack_session_enqueue"):
            raise AotpackError(StatusCode.UNSUPPORTED, "the loaded aotpack runtime library has no "
                               "aotpack_session_enqueue: it is older than this Python package; install them together")
        if self.io != "device":
            # the runtime's own words (a host-I/O or CPU session), without touching torch
            _check(self._lib.aotpack_session_enqueue(self._handle, None, 0, None))
        if stream is None:
            import torch  # a device-I/O session takes torch's CUDA tensors, so torch is there

            stream = torch.cuda.current_stream(self._device_index)
        handle = getattr(stream, "cuda_stream", stream)
        if not isinstance(handle, int):
            raise AotpackError(StatusCode.INVALID_ARGUMENT, f"stream must be a CUDA stream (an object with "
                               f"cuda_stream, or its handle as an int), not {type(stream).__name__}")
        return self._run_device(self._ordered(inputs), handle)

    def synchronize(self) -> None:
        """Waits for the runs enqueue() queued and raises AotpackError for a check that failed in one of them."""
        if not self._handle.value:
            raise AotpackError(StatusCode.INVALID_ARGUMENT, "the session is closed (Session.close()); make a new one")
        if hasattr(self._lib, "aotpack_session_synchronize"):
            _check(self._lib.aotpack_session_synchronize(self._handle))

    def _device_outputs(self, stream: int | None = None) -> list[DeviceTensor]:
        # A device-I/O session's outputs stay at one address, so a run at the shape of the last run gives the same
        # (immutable) DeviceTensors again: making one, a frozen dataclass, took 2.5-3 us of a run's 15 on the fake
        # driver here (tests/runtime), more than the runtime's own call.
        outputs = self._last_outputs
        t = self._output
        for i in range(len(outputs)):
            _check(self._lib.aotpack_session_output(self._handle, i, ctypes.byref(t)))
            shape = tuple(t.shape[: t.rank])
            last = outputs[i]
            if last is None or last.shape != shape or last.stream != stream or last.data != (t.data or 0):
                outputs[i] = DeviceTensor(self._model.outputs[i].name, t.data or 0, shape, _DTYPES[t.dtype],
                                          self._device_index, self, stream)
        return list(outputs)

    def _host_outputs(self, copy: bool = True) -> list[np.ndarray]:
        outputs = []
        for i in range(len(self._model.outputs)):
            t = _Tensor()
            _check(self._lib.aotpack_session_output(self._handle, i, ctypes.byref(t)))
            shape = tuple(t.shape[d] for d in range(t.rank))
            dtype = _DTYPES[t.dtype]
            dtype = np.dtype(np.uint16) if isinstance(dtype, str) else dtype
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if not copy:  # a view of the session's memory: it keeps the session alive, the next run overwrites it
                buffer = (ctypes.c_char * max(nbytes, 1)).from_address(t.data) if nbytes else bytearray(1)
                view = np.frombuffer(buffer, dtype=np.uint8, count=nbytes).view(dtype).reshape(shape)
                view.flags.writeable = False
                outputs.append(_SessionArray(view, self))
                continue
            out = np.empty(shape, dtype=dtype)
            if out.nbytes:
                ctypes.memmove(out.ctypes.data, t.data, out.nbytes)
            outputs.append(out)
        return outputs

    def close(self) -> None:
        if getattr(self, "_handle", None) and self._handle.value:
            self._lib.aotpack_session_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self) -> None:
        self.close()
