# Kept equal to GLYD_VERSION_* in include/glyd.h (a test checks).
__version__ = "0.1.0"
