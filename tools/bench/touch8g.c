/* Touches 8 GiB page by page: one store per 4K page, MADV_NOHUGEPAGE so that every
 * fault is an order-0 one (2,097,152 faults), then unmaps it. */
#include <sys/mman.h>
int main(void) {
    size_t len = 8UL << 30;
    char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return 1;
    madvise(p, len, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < len; i += 4096) ((volatile char *)p)[i] = 1;
    munmap(p, len);
    return 0;
}
