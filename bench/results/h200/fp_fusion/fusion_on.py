"""pytest plugin: every kernel compiled with FP fusion, as before tilegen.decisions (A/B only)."""
from tilegen.runtime import launch

_init = launch.Kernel.__init__
launch.Kernel.__init__ = lambda self, fn, fp_fusion=True: _init(self, fn, True)
