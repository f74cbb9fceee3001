/* Read-only file mappings that end with a line, not a SIGBUS. A page of a mapped file that another
 * process truncated underneath raises SIGBUS when read, which kills a program without a word (a
 * cache entry rebuilt by a second job, a checkpoint replaced in place). Mappings made here are
 * registered with the file's name, and a SIGBUS inside one stops the program with
 * "PROG: error: FILE changed size while it was in use (...)" and exit status 1; a SIGBUS
 * anywhere else is left to its default action. */
#ifndef RT_MAPPED_H
#define RT_MAPPED_H

#include <stddef.h>

/* mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0), registered under path; MAP_FAILED (errno set)
 * when the mapping fails. A full registry (256 live mappings) maps without the name. */
void *rt_map_file(int fd, size_t size, const char *path);
/* munmap, and the registration goes. */
void rt_unmap_file(void *addr, size_t size);

#endif
