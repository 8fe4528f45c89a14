/* Loaded into the test suite's Chromium with LD_PRELOAD (tests/support/chromium.py).
 *
 * Chromium watches the host's network interfaces through a NETLINK_ROUTE socket, and when an
 * address appears or goes it fails every request still waiting for a connection with
 * net::ERR_NETWORK_CHANGED, even requests to 127.0.0.1. Docker adds and removes a veth pair
 * for every sandbox the integration tests on the other pytest worker start, so a console
 * page loading its scripts at that moment never started (seen in CI: dozens of script loads
 * failed at once and the page opened no websocket).
 *
 * Refusing that one kind of socket makes Chromium's address tracker take the path it has for
 * a socket it cannot open: it assumes it is always online and never reports a change. Every other socket,
 * and glibc's own netlink use (which does not go through this symbol), are untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/netlink.h>
#include <stddef.h>
#include <sys/socket.h>

int socket(int domain, int type, int protocol) {
    static int (*real_socket)(int, int, int);
    if (domain == AF_NETLINK && protocol == NETLINK_ROUTE) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    if (real_socket == NULL) {
        real_socket = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
    }
    return real_socket(domain, type, protocol);
}
