package shardid

import (
	"errors"

	"github.com/shardid/shardid/internal/routesql"
)

// hintPooler returns err with ErrPooledPreparedStatement added when err is
// PostgreSQL's "prepared statement already exists" (42P05) or "does not
// exist" (26000), and err unchanged otherwise.
func hintPooler(err error) error {
	if !routesql.IsPooledStatement(err) || errors.Is(err, ErrPooledPreparedStatement) {
		return err
	}
	return &pooledStatementError{err}
}

// pooledStatementError is a driver's error that ErrPooledPreparedStatement
// explains: errors.Is finds both, errors.As the driver's type.
type pooledStatementError struct{ err error }

func (e *pooledStatementError) Error() string {
	return ErrPooledPreparedStatement.Error() + ": " + e.err.Error()
}

func (e *pooledStatementError) Unwrap() []error { return []error{ErrPooledPreparedStatement, e.err} }
