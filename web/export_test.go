package web

// WriteReaders is the number of write bodies being read (and charged).
func (s *Server) WriteReaders() int {
	s.writes.mu.Lock()
	defer s.writes.mu.Unlock()
	return s.writes.readers.Len()
}
