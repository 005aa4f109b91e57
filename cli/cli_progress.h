/* cli_progress.h: the tuner's progress on stderr, shared by `sparsejit tune` and Lua's
 * sparsejit.tune: on a terminal one line redrawn (a bar, candidates done, best so far, time
 * left), elsewhere one plain line per candidate. */
#ifndef SJ_CLI_PROGRESS_H
#define SJ_CLI_PROGRESS_H

#include "sparsejit.h"

typedef struct cli_progress {
    int tty;                 /* redraw one line; else one plain line per candidate */
    int drawn;               /* a redrawn line is on the screen: cli_progress_end ends it */
} cli_progress;

/* tty: whether stderr is a terminal (isatty(2)). */
void cli_progress_begin(cli_progress *p, int tty);
/* An sj_tune_progress_fn (user: the cli_progress); returns 0: it never stops the tune. */
int cli_progress_print(void *user, const sj_tune_progress *p);
/* Ends the redrawn line, if any, so that what follows starts on a line of its own. */
void cli_progress_end(cli_progress *p);

#endif
