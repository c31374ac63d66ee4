// Whether the client of a request still holds its connection. cpp-httplib 0.11 tells a
// handler nothing about its socket, and notices a client that left only when a write
// fails; a non-streaming response writes once, at the end. So a handler that waits finds
// its socket by the connection's addresses and polls it for end-of-file.
#pragma once

#include <string>
#include <utility>

namespace pagoda::server {

struct ConnectionAddress {
  std::string local_ip;
  int local_port = -1;
  std::string remote_ip;
  int remote_port = -1;
};

// This process's TCP socket with exactly these endpoints (numeric addresses as
// getnameinfo writes them, as cpp-httplib fills Request::local_addr / remote_addr);
// -1 when none.
int find_connection_socket(const ConnectionAddress& addr);

// True when the peer has closed or reset the connection (or shut down its sending side:
// an HTTP client that will not read a reply). Never blocks, never consumes data.
bool peer_closed(int fd);

// Looks the socket up on the first check; a connection it cannot find is never reported
// closed (the request then runs to its end, as before).
class ConnectionWatch {
 public:
  explicit ConnectionWatch(ConnectionAddress addr) : addr_(std::move(addr)) {}
  bool client_gone();

 private:
  ConnectionAddress addr_;
  int fd_ = -2;  // -2: not looked up yet
};

}  // namespace pagoda::server
