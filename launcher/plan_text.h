// The plan's text helpers and two of its checks, shared by plan_report.c (the printing) and
// plan_verdict.c (the checks and refusals): byte counts, grouped digits, durations and SI prefixes,
// each macro formatting into a temporary of its own so several fit in one printf.
#ifndef MT_PLAN_TEXT_H
#define MT_PLAN_TEXT_H

#include "launcher/launcher.h"
#include <stddef.h>
#include <stdint.h>

// 121366437888 -> "121,366,437,888"; 393 -> "6m33s"; 3.74e15 -> "3.74 P".
const char *plan_grouped(char *buf, size_t n, uint64_t v);
const char *plan_duration(char *buf, size_t n, double s);
const char *plan_si(char *buf, size_t n, double v);

// plan_verdict.c, for the printed checks: the host bytes with a variant of the config (only the
// compute rank's depend on it), and whether ulimit -l may be short of the regions GPU DMA pins.
uint64_t plan_host_with(const mt_plan *p, const mt_config *c);
int plan_memlock_short(const mt_plan *p, const host_probe *h);

#define H(x) plan_bytes_text((char[24]){0}, 24, (double)(x))
#define G(x) plan_grouped((char[32]){0}, 32, (uint64_t)(x))
#define T(x) plan_duration((char[24]){0}, 24, (double)(x))
#define SI(x) plan_si((char[24]){0}, 24, (double)(x))

#endif
