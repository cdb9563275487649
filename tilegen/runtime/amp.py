"""torch.autocast for matmul ops: inside a mixed-precision region their inputs are cast to the
region's dtype, as torch.matmul's and F.linear's are, so that an op can stand in for them in a model
trained with float32 weights under autocast (an unregistered custom op would get the float32 tensors
as given: a float32 product, or a dtype error beside an activation autocast made half precision).

Elementwise ops and reductions take their inputs as given, as PyTorch's pointwise ops do (they
are on none of autocast's lists); a reduction's math is float32 on half inputs already, what
autocast's float32 policy for softmax and the norms asks for."""

import torch

# Whether any autocast region is active (one call, cheap enough for every call of a matmul op;
# torch.compile traces it as a constant of the region).
autocasting = torch._C._is_any_autocast_enabled


def autocast_inputs(tensors, dtypes, operands):
    """`tensors` cast for the autocast region of their device, if one is active: `dtypes`, each
    input's dtypes (the spec's); `operands`, the indices of A and B. An op casts where both operands
    may take the region's dtype (a float8 product does not: its operands and their float32 scales
    are as the caller quantized them); each floating input that may take it is then cast to it, but
    float64 ones, and tensors of another device type, as PyTorch's autocast leaves them."""
    first, second = operands
    a = tensors[first]
    if not isinstance(a, torch.Tensor):
        return tensors  # (the op's own checks name the argument)
    device = a.device.type
    if not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    if dtype not in dtypes[first] or dtype not in dtypes[second]:
        return tensors
    cast = None  # (a plain loop: this runs on every call in a region, where most inputs need no cast)
    for index, tensor in enumerate(tensors):
        if (isinstance(tensor, torch.Tensor) and tensor.dtype is not dtype and tensor.dtype is not torch.float64
                and dtype in dtypes[index] and tensor.is_floating_point() and tensor.device.type == device):
            cast = cast or list(tensors)
            cast[index] = tensor.to(dtype)
    return tensors if cast is None else tuple(cast)
