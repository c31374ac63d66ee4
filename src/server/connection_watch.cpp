#include "server/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace pagoda::server {
namespace {

bool endpoint(int fd, bool peer, std::string* ip, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return false;
  if (addr.ss_family == AF_INET)
    *port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  else if (addr.ss_family == AF_INET6)
    *port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  else
    return false;
  char host[NI_MAXHOST];
  if (getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return false;
  *ip = host;
  return true;
}

}  // namespace

int find_connection_socket(const ConnectionAddress& want) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long v = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || v == dirfd(dir)) continue;
    const int fd = static_cast<int>(v);
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    std::string ip;
    int port = -1;
    if (!endpoint(fd, true, &ip, &port) || port != want.remote_port || ip != want.remote_ip)
      continue;
    if (!endpoint(fd, false, &ip, &port) || port != want.local_port || ip != want.local_ip)
      continue;
    found = fd;
    break;
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    // Readable: a pipelined request (alive) or end-of-file (gone).
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

bool ConnectionWatch::client_gone() {
  if (fd_ == -2) fd_ = find_connection_socket(addr_);
  return fd_ >= 0 && peer_closed(fd_);
}

}  // namespace pagoda::server
