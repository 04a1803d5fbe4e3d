#ifndef MT_FSUTIL_H
#define MT_FSUTIL_H

// mkdir -p; exits with a message naming the folder on failure.
void make_dirs(const char *dir);
double now_seconds(void); // CLOCK_MONOTONIC

#endif
