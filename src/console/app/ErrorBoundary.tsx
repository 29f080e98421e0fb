import { Component, type ErrorInfo, type ReactNode } from 'react';

/** A readable message instead of a blank page when a page throws while rendering. */
export class ErrorBoundary extends Component<{ children: ReactNode; resetKey?: string }, { error: Error | null }> {
  override state: { error: Error | null } = { error: null };

  static getDerivedStateFromError(error: Error) {
    return { error };
  }

  override componentDidCatch(error: Error, info: ErrorInfo) {
    console.error('console page error', error, info.componentStack);
  }

  override componentDidUpdate(prev: { resetKey?: string }) {
    if (prev.resetKey !== this.props.resetKey && this.state.error) this.setState({ error: null });
  }

  override render() {
    if (!this.state.error) return this.props.children;
    return (
      <div className="alert alert-error" role="alert">
        <h2>This page could not be shown</h2>
        <p>{this.state.error.message || 'An unexpected error occurred.'}</p>
        <p>
          <button type="button" onClick={() => this.setState({ error: null })}>
            Try again
          </button>{' '}
          <a href="/app/">Go to the start page</a>
        </p>
      </div>
    );
  }
}
