/* The Python frame reader the CPU sampler calls (py_frame.c). */
#ifndef RLSCOPE_PY_FRAME_H_
#define RLSCOPE_PY_FRAME_H_

#include "collector/rlscope_collector.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The reader for this interpreter and its name ("CPython 3.11"), or NULL
 * (and "") when this CPython's frames are not read (before 3.11, after 3.13). */
rlscope_py_module_reader_t RlscopePyModuleReader(const char** what);

/* The running interpreter's GIL: its state's address range, where threads
 * waiting for it block (rlscope_set_py_gil). 0 when not known (the same
 * versions as the reader). Call with the GIL held. */
int RlscopePyGil(const void** begin, size_t* size);

/* The calling Python frame when it is a coroutine's (an `async def`, an
 * async generator, a @types.coroutine generator), else NULL: the key that
 * pairs a range's enter and exit across awaits (the frame lives in its
 * coroutine object, so it is the same at both). Call with the GIL held. */
const void* RlscopePyCoroutineFrame(void);

#ifdef __cplusplus
}
#endif

#endif /* RLSCOPE_PY_FRAME_H_ */
