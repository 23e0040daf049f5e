/* The progress line of normgrad-cli (progress.h). */
#include "progress.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define REDRAW_S 0.1

static bool enabled = true;
static cli_progress *active; /* the line on the screen, if any */

void cli_progress_enable(bool on) { enabled = on; }

/* Columns of the terminal on stderr, minus one so the line never wraps (a wrapped line cannot be
 * redrawn with '\r'); 79 when the size is unknown. */
static int columns(void) {
  struct winsize ws;
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) return ws.ws_col - 1;
  return 79;
}

/* Overwrite the previous line with `text` (and blanks over whatever it left longer). */
static void put_line(cli_progress *p, const char *text) {
  char line[512];
  const int cols = columns();
  int n = snprintf(line, sizeof line, "%s", text);
  if (n < 0) n = 0;
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  if (n > cols) n = cols;
  line[n] = '\0';
  const int pad = p->width > n ? p->width - n : 0;
  fprintf(stderr, "\r%s%*s", line, pad, "");
  if (pad) fprintf(stderr, "\r%s", line); /* the cursor back at the end of the text */
  fflush(stderr);
  p->width = n;
}

static void draw(cli_progress *p) {
  char text[512];
  if (p->total)
    snprintf(text, sizeof text, "%s  %llu/%llu (%d%%)", p->label ? p->label : "",
             (unsigned long long)p->done, (unsigned long long)p->total,
             (int)(100.0 * (double)p->done / (double)p->total));
  else
    snprintf(text, sizeof text, "%s  %llu", p->label ? p->label : "",
             (unsigned long long)p->done);
  put_line(p, text);
  p->last = cli_now_s();
}

void cli_progress_begin(cli_progress *p, uint64_t total, const char *label) {
  if (active && active != p) cli_progress_end(active);
  memset(p, 0, sizeof *p);
  p->total = total;
  p->label = label;
  p->shown = enabled && isatty(STDERR_FILENO);
  if (!p->shown) return;
  active = p;
  draw(p);
}

void cli_progress_step(cli_progress *p, uint64_t n) {
  p->done += n;
  if (!p->shown) return;
  if ((p->total && p->done >= p->total) || cli_now_s() - p->last >= REDRAW_S) draw(p);
}

void cli_progress_end(cli_progress *p) {
  if (p->shown && p->width > 0) {
    fprintf(stderr, "\r%*s\r", p->width, "");
    fflush(stderr);
  }
  p->shown = false;
  p->width = 0;
  if (active == p) active = NULL;
}

void cli_progress_clear(void) {
  if (!active || active->width == 0) return;
  fprintf(stderr, "\r%*s\r", active->width, "");
  fflush(stderr);
  active->width = 0; /* the next draw starts on a clean line */
}
