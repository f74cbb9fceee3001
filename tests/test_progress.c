/* The set-up progress bar (runtime/base/rt_progress.h): the text of a bar at 0, 45 and 100% (the
 * fill, the percentage, the size and the rate), done past total shown full, and counting from
 * several threads at once adds up (OpenMP loops call rt_progress_add concurrently). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/rt_progress.h"
#include "tests/testutil.h"

static void *add_many(void *arg) {
    for (int i = 0; i < 100000; i++) rt_progress_add(arg, 3);
    return NULL;
}

int main(void) {
    char buf[160];
    rt_progress_format(buf, sizeof buf, "a.txt", 0, 501000000, 0);
    TZ_EXPECT(strcmp(buf, "[--------------------] a.txt: 0% of 501 MB, 0.0 MB/s") == 0, "%s", buf);
    rt_progress_format(buf, sizeof buf, "a.txt", 225450000, 501000000, 4.8);
    TZ_EXPECT(strcmp(buf, "[#########-----------] a.txt: 45% of 501 MB, 47.0 MB/s") == 0, "%s", buf);
    rt_progress_format(buf, sizeof buf, "a.txt", 600000000, 501000000, 10);
    TZ_EXPECT(strncmp(buf, "[####################] a.txt: 100% of 501 MB", 44) == 0, "%s", buf);
    rt_progress p;
    rt_progress_begin(&p, "t", 1000, false); /* not shown: counts only */
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, add_many, &p);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    TZ_EXPECT(p.done == 4u * 100000u * 3u, "4 threads added %llu, expected 1200000", (unsigned long long)p.done);
    rt_progress_end(&p);
    return tz_test_result("test_progress");
}
