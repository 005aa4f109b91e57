/* cli_progress.c: the tuner's progress on stderr (cli_progress.h). */
#include "cli/cli_progress.h"

#include <stdio.h>

static void format_eta(double s, char *buf, size_t len)
{
    if (s < 0) snprintf(buf, len, "?");
    else if (s < 3600) snprintf(buf, len, "%d:%02d", (int)s / 60, (int)s % 60);
    else snprintf(buf, len, "%dh%02d", (int)s / 3600, (int)s % 3600 / 60);
}

void cli_progress_begin(cli_progress *p, int tty)
{
    p->tty = tty;
    p->drawn = 0;
}

int cli_progress_print(void *user, const sj_tune_progress *p)
{
    cli_progress *ps = user;
    char eta[32];
    format_eta(p->eta_s, eta, sizeof eta);
    if (ps->tty) {
        const int width = 24;
        int filled = p->total > 0 ? (int)((double)p->done / p->total * width + 0.5) : 0;
        if (filled > width) filled = width;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        char total[16];
        if (p->total > 0) snprintf(total, sizeof total, "%d", p->total);
        else snprintf(total, sizeof total, "?");
        fprintf(stderr, "\r\033[K[%s] %d/%s  rejected %d  best %.2f us %s  ETA %s", bar, p->done, total, p->rejected,
                p->best_us, p->best_config, eta);
        ps->drawn = 1;
    } else {
        fprintf(stderr, "tune: %d/%d %-13s %9.2f us  %s  (best %.2f us, ETA %s)\n", p->done, p->total, p->status,
                p->median_us, p->config, p->best_us, eta);
    }
    fflush(stderr);
    return 0;
}

void cli_progress_end(cli_progress *p)
{
    if (p->drawn) fprintf(stderr, "\n");
    p->drawn = 0;
}
