// libhumming_core.so, the shared form of libhumming that humming_aot._C and _torch_ops.so link:
// its content is the whole static library (CMakeLists.txt links it in whole). This translation
// unit only gives the target a source of its own.
#include "humming/humming.h"
