/* _fastloop.c: the binlog reader's event loop (reader.BinlogReader._consume) in C, for the
 * module (_fastdecode.c). */
#ifndef SPARKCDC_FASTLOOP_H
#define SPARKCDC_FASTLOOP_H
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

extern PyTypeObject FL_LoopType;   /* _fastdecode.Loop */
extern PyTypeObject FL_EventsType; /* what Loop.events returns */
int fl_init(void);

#endif
