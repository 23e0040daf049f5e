/* A one-line progress indicator on stderr for the long loops of normgrad-cli (bench's timed
 * repetitions today, a `tune` sweep later).
 *
 * Drawn only when stderr is a terminal and progress is enabled (a subcommand turns it off for
 * machine-readable output such as --json): redrawn in place with '\r' at most every 100 ms,
 * never wider than the terminal, and erased by cli_progress_end, so nothing of it stays on the
 * screen or reaches a pipe, a file or stdout. cli_error() erases a line that is showing before
 * it prints, so an error never lands at the end of a progress line.
 *
 *     cli_progress pr;
 *     cli_progress_begin(&pr, reps, "bench rmsnorm backward: timing");
 *     for (unsigned r = 0; r < reps; r++) { run(); cli_progress_step(&pr, 1); }
 *     cli_progress_end(&pr);
 *
 * One progress line at a time (a second begin ends the first). Not thread-safe: call it from the
 * thread that runs the loop. */
#ifndef NG_CLI_PROGRESS_H
#define NG_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct cli_progress {
  bool shown;       /* drawing on this terminal (false: every call is a no-op) */
  uint64_t total;   /* steps expected (0: unknown, no percentage) */
  uint64_t done;    /* steps reported so far */
  const char *label; /* borrowed: must outlive the progress line */
  double last;      /* monotonic time of the last draw */
  int width;        /* characters drawn last, to be overwritten */
} cli_progress;

/* Start a line "LABEL  DONE/TOTAL (P%)" and draw it at once (when shown). */
void cli_progress_begin(cli_progress *p, uint64_t total, const char *label);
/* `n` more steps done; redraws when 100 ms have passed since the last draw, or at the end. */
void cli_progress_step(cli_progress *p, uint64_t n);
/* Erase the line (the cursor is left at the start of an empty line). */
void cli_progress_end(cli_progress *p);

/* Allow progress lines in this process (default: true). Subcommands that write machine-readable
 * output (`bench --json`) turn them off before their first cli_progress_begin. */
void cli_progress_enable(bool on);
/* Erase the current line, if any is showing, without ending it (cli_error calls this). */
void cli_progress_clear(void);

#endif
